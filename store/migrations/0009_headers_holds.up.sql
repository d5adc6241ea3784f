-- Message headers travel inside segment frames (frame format 2, see
-- frame.go); a dead letter keeps its message's headers here. NULL: none.
ALTER TABLE comb_dead_letters ADD COLUMN headers bytea;

-- Per-message delays. A message pushed with delay_ms or not_before holds
-- its partition back until ready_at: the partition's messages from it on
-- are not delivered before then, so a partition keeps its order. One row
-- per delayed message, written by its push; the sweeper deletes rows whose
-- time has passed, so the table holds only the holds still pending. No
-- foreign key, like comb_segments: comb_partitions is updated by every
-- push, and a queue's delete removes its holds itself.
CREATE TABLE comb_holds (
    partition_id  bigint NOT NULL,
    msg_offset    bigint NOT NULL,
    ready_at      timestamptz NOT NULL,
    PRIMARY KEY (partition_id, msg_offset)
);
CREATE INDEX comb_holds_ready ON comb_holds (ready_at);

-- The latest ready_at of any hold a partition was given: a pop looks for
-- holds only while it is in the future, so partitions that never had a
-- delayed message pay nothing. Adding a nullable column rewrites nothing.
ALTER TABLE comb_partitions ADD COLUMN held_until timestamptz;
