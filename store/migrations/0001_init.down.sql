DROP TABLE IF EXISTS comb_dead_letters, comb_cursors, comb_groups, comb_segments, comb_partitions, comb_queues;
