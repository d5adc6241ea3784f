DROP INDEX comb_partitions_low_created;
ALTER TABLE comb_partitions DROP COLUMN low_created_at;
