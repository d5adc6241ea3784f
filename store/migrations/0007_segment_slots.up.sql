-- Segments move into a partitioned table, so that retention reclaims their
-- space by TRUNCATE instead of by vacuum (store/slots.go has the design).
--
-- comb_segments is partitioned by slot:
--   * slots 0..11 are a ring of "hot" children. A segment of a queue whose
--     retention is short (completed_retention_s and max_age_s within the
--     ring's horizon) goes into the slot of the time of its push: slot =
--     floor(epoch / 45 s) mod 12. The sweeper's row deletes leave dead heap
--     tuples and dead TOAST chunks there; once a slot has no live row left
--     it is truncated, which frees all of it at once. A slot is emptied
--     before the ring comes back to it: what is still live then (a slow
--     group's backlog) moves to the cold child.
--   * slot -1 is the cold child: segments of queues that keep messages
--     long or forever, and whatever the ring moved out. Row deletes there
--     are reclaimed by autovacuum, tuned below for a TOAST-heavy table.
--
-- The primary key must hold the partition key; (partition_id, base_offset)
-- stays unique because offsets are allocated under the partition row's lock.
ALTER TABLE comb_segments RENAME TO comb_segments_old;
ALTER INDEX comb_segments_pkey RENAME TO comb_segments_old_pkey;

CREATE TABLE comb_segments (
    partition_id  bigint NOT NULL,
    base_offset   bigint NOT NULL,
    count         integer NOT NULL,
    bytes         integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    payload       bytea NOT NULL,
    frame_format  smallint NOT NULL DEFAULT 0,
    slot          smallint NOT NULL DEFAULT -1,
    PRIMARY KEY (partition_id, base_offset, slot)
) PARTITION BY LIST (slot);
ALTER TABLE comb_segments ALTER COLUMN payload SET STORAGE EXTERNAL;

-- Hot children are never vacuumed for space: TRUNCATE reclaims them
-- (anti-wraparound vacuum still runs, as it must). Autovacuum still
-- analyzes them, so the planner knows their size.
CREATE TABLE comb_segments_hot_00 PARTITION OF comb_segments FOR VALUES IN (0) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_01 PARTITION OF comb_segments FOR VALUES IN (1) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_02 PARTITION OF comb_segments FOR VALUES IN (2) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_03 PARTITION OF comb_segments FOR VALUES IN (3) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_04 PARTITION OF comb_segments FOR VALUES IN (4) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_05 PARTITION OF comb_segments FOR VALUES IN (5) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_06 PARTITION OF comb_segments FOR VALUES IN (6) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_07 PARTITION OF comb_segments FOR VALUES IN (7) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_08 PARTITION OF comb_segments FOR VALUES IN (8) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_09 PARTITION OF comb_segments FOR VALUES IN (9) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_10 PARTITION OF comb_segments FOR VALUES IN (10) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);
CREATE TABLE comb_segments_hot_11 PARTITION OF comb_segments FOR VALUES IN (11) WITH (autovacuum_vacuum_threshold = 2147483647, autovacuum_vacuum_insert_threshold = -1, toast.autovacuum_vacuum_threshold = 2147483647, toast.autovacuum_vacuum_insert_threshold = -1);

CREATE TABLE comb_segments_cold PARTITION OF comb_segments FOR VALUES IN (-1) WITH (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    toast.autovacuum_vacuum_scale_factor = 0.02, toast.autovacuum_vacuum_threshold = 1000,
    toast.autovacuum_vacuum_cost_delay = 0);

INSERT INTO comb_segments (partition_id, base_offset, count, bytes, created_at, payload, frame_format, slot)
SELECT partition_id, base_offset, count, bytes, created_at, payload, frame_format, -1 FROM comb_segments_old;
DROP TABLE comb_segments_old;
