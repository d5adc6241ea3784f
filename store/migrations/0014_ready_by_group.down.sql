-- Back to one row a partition: a partition with a row of any group (or
-- '') keeps one, which is the old invariant (some cursor short of the end
-- has its partition's row).
DELETE FROM comb_ready r USING comb_ready o
WHERE o.partition_id = r.partition_id AND o.group_name < r.group_name;
DROP INDEX comb_ready_queue;
ALTER TABLE comb_ready DROP CONSTRAINT comb_ready_pkey;
ALTER TABLE comb_ready DROP COLUMN group_name;
ALTER TABLE comb_ready ADD PRIMARY KEY (partition_id);
CREATE INDEX comb_ready_queue ON comb_ready (queue_id);
