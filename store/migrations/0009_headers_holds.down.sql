ALTER TABLE comb_partitions DROP COLUMN held_until;
DROP TABLE comb_holds;
ALTER TABLE comb_dead_letters DROP COLUMN headers;
