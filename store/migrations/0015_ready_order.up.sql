-- The ready set's rows of a queue and group in partition id order: a pop
-- that names no partition reads them in rotation from where the group's
-- last scan leased (store/pop.go, popScan), and stops once it has what
-- it needs, instead of reading every ready partition's cursor to take
-- the least recently leased.
DROP INDEX comb_ready_queue;
CREATE INDEX comb_ready_queue ON comb_ready (queue_id, group_name, partition_id);
