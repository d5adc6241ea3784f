-- Producer ids remembered for deduplication, one row per (partition, id),
-- written in the push transaction that stores the message.
CREATE TABLE comb_dedup (
    partition_id  bigint NOT NULL,
    producer_id   text NOT NULL,
    queue_id      bigint NOT NULL,
    msg_offset    bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, producer_id)
);
-- The sweeper forgets ids past a queue's window in bounded steps.
CREATE INDEX comb_dedup_expiry ON comb_dedup (queue_id, created_at);
