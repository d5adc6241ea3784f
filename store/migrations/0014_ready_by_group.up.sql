-- The ready set by group: a row (partition, group) says that group may
-- have messages to pop in that partition, and a row (partition, '') that
-- some group may: a push writes the latter (it does not read the groups),
-- and the sweeper spreads it into rows of the groups short of the
-- partition's end. A pop that names no partition reads its group's rows
-- and the '' rows, so a group that stopped popping (its cursors short
-- everywhere) no longer makes every other group's pops read every
-- partition it lags on.
--
-- The invariant (store/ready.go, TestReadySetCoversReadyCursors): at every
-- commit, each group's cursor short of its partition's next_offset (a
-- missing cursor counts as one at the oldest retained message) has its
-- row or the partition's '' row.
--
-- The rows there become '' rows: a superset, which the sweeper spreads
-- and trims. A broker from before this migration writes rows by partition
-- alone (ON CONFLICT (partition_id)), which this table refuses: do not mix
-- brokers of both sides of it (docs/operations.md).
ALTER TABLE comb_ready ADD COLUMN group_name text NOT NULL DEFAULT '';
ALTER TABLE comb_ready DROP CONSTRAINT comb_ready_pkey;
ALTER TABLE comb_ready ADD PRIMARY KEY (partition_id, group_name);
DROP INDEX comb_ready_queue;
CREATE INDEX comb_ready_queue ON comb_ready (queue_id, group_name);
