-- Deduplication at segment cost: one row per partition per push
-- transaction, whatever the number of ids it remembers, instead of one row
-- (and one primary-key entry) per message. ids[k] was stored at offset
-- base_offset + rels[k]. A broker keeps the sets of the partitions it
-- pushes to in memory and reads from here only the sets written since it
-- last looked (by another broker, or before a restart), through the
-- primary key; the sweeper deletes whole sets past their window, found by
-- BRIN on created_at. docs/operations.md, "Deduplication".
CREATE TABLE comb_dedup_sets (
    partition_id  bigint NOT NULL,
    base_offset   bigint NOT NULL,
    queue_id      bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ids           text[] NOT NULL,
    rels          int[] NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);
-- Like segment payloads: stored out of line without pglz, whose CPU on
-- every push costs more than the WAL it would save.
ALTER TABLE comb_dedup_sets ALTER COLUMN ids SET STORAGE EXTERNAL;
CREATE INDEX comb_dedup_sets_expiry_brin ON comb_dedup_sets USING brin (created_at);
-- The ids remembered so far: a set of one each. Two rows of one partition
-- never share an offset (each names the message stored there).
INSERT INTO comb_dedup_sets (partition_id, base_offset, queue_id, created_at, ids, rels)
SELECT partition_id, msg_offset, queue_id, created_at, ARRAY[producer_id], ARRAY[0]
FROM comb_dedup;
DROP TABLE comb_dedup;
