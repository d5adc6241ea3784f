CREATE TABLE comb_dedup (
    partition_id  bigint NOT NULL,
    producer_id   text NOT NULL,
    queue_id      bigint NOT NULL,
    msg_offset    bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, producer_id)
);
CREATE INDEX comb_dedup_expiry_brin ON comb_dedup USING brin (created_at);
-- The newest offset of each id, as the old table kept it.
INSERT INTO comb_dedup (partition_id, producer_id, queue_id, msg_offset, created_at)
SELECT DISTINCT ON (s.partition_id, x.id) s.partition_id, x.id, s.queue_id, s.base_offset + x.rel, s.created_at
FROM comb_dedup_sets s, unnest(s.ids, s.rels) AS x(id, rel)
ORDER BY s.partition_id, x.id, s.base_offset DESC;
DROP TABLE comb_dedup_sets;
