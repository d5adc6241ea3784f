-- The ready set: the partitions in which some group may have messages to
-- pop. A pop that names no partition, and the safety check of parked long
-- polls, read a queue's rows here instead of every cursor of the group, so
-- their cost follows the partitions with messages, not all of them.
--
-- The invariant (store/ready.go, TestReadySetCoversReadyCursors): at every
-- commit, each partition with a cursor short of its next_offset has a row.
-- A push inserts its partitions' rows (ON CONFLICT DO NOTHING, under the
-- partition rows' locks it already holds); a new group or a seek that moves
-- cursors back upserts them, and the update takes the row's lock.
-- Only the sweeper deletes rows: it locks them and their partition rows
-- (SKIP LOCKED: it never waits on a push), then deletes those whose every
-- cursor has reached its end, seen in a snapshot taken after the locks.
-- Rows may so outlive their messages for a sweep interval; they never go
-- missing.
CREATE TABLE comb_ready (
    partition_id  bigint PRIMARY KEY,
    queue_id      bigint NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);
CREATE INDEX comb_ready_queue ON comb_ready (queue_id);
-- Every partition that retains messages: a superset, which the sweeper
-- trims.
INSERT INTO comb_ready (partition_id, queue_id)
SELECT id, queue_id FROM comb_partitions WHERE next_offset > 0;
