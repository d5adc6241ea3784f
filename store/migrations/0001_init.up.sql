-- Comb's log engine. Every table lives in the connection's search_path schema.

CREATE TABLE comb_queues (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    config      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per partition, updated by every push that touches it: the row lock
-- taken to allocate offsets is held to commit, so offsets become visible in
-- commit order. Fixed population and constant updates: leave room for HOT
-- updates, vacuum often, and never truncate (truncation takes an ACCESS
-- EXCLUSIVE lock that stalls every push and pop).
CREATE TABLE comb_partitions (
    id              bigserial PRIMARY KEY,
    queue_id        bigint NOT NULL REFERENCES comb_queues(id) ON DELETE CASCADE,
    name            text NOT NULL,
    next_offset     bigint NOT NULL DEFAULT 0,
    low_offset      bigint NOT NULL DEFAULT 0,
    retained_bytes  bigint NOT NULL DEFAULT 0,
    UNIQUE (queue_id, name)
) WITH (fillfactor = 50, vacuum_truncate = off,
        autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);

-- A segment holds one transaction's messages of one partition: offsets
-- [base_offset, base_offset + count), framed into payload. One row per
-- partition per push transaction, not one per message.
CREATE TABLE comb_segments (
    partition_id  bigint NOT NULL,
    base_offset   bigint NOT NULL,
    count         integer NOT NULL,
    bytes         integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    payload       bytea NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);
ALTER TABLE comb_segments ALTER COLUMN payload SET STORAGE EXTERNAL;

CREATE TABLE comb_groups (
    queue_id    bigint NOT NULL REFERENCES comb_queues(id) ON DELETE CASCADE,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, name)
);

-- One cursor per (partition, group): committed is the first offset the group
-- has not settled; a lease covers [lease_from, lease_upto]. Fixed population,
-- updated on every pop and ack: tuned like comb_partitions.
CREATE TABLE comb_cursors (
    partition_id    bigint NOT NULL,
    group_name      text NOT NULL,
    queue_id        bigint NOT NULL,
    committed       bigint NOT NULL DEFAULT 0,
    lease_id        text,
    lease_from      bigint,
    lease_upto      bigint,
    lease_until     timestamptz,
    leased_at       timestamptz,
    attempts        integer NOT NULL DEFAULT 0,
    delivered_upto  bigint NOT NULL DEFAULT -1,
    PRIMARY KEY (partition_id, group_name)
) WITH (fillfactor = 50, vacuum_truncate = off,
        autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);
CREATE INDEX comb_cursors_queue_group ON comb_cursors (queue_id, group_name);

CREATE TABLE comb_dead_letters (
    id            bigserial PRIMARY KEY,
    queue_id      bigint NOT NULL REFERENCES comb_queues(id) ON DELETE CASCADE,
    group_name    text NOT NULL,
    partition_id  bigint NOT NULL,
    partition     text NOT NULL,
    msg_offset    bigint NOT NULL,
    producer_id   text NOT NULL DEFAULT '',
    attempts      integer NOT NULL,
    reason        text NOT NULL,
    dead_at       timestamptz NOT NULL DEFAULT now(),
    data          bytea NOT NULL
);
CREATE INDEX comb_dead_letters_queue ON comb_dead_letters (queue_id, id);
