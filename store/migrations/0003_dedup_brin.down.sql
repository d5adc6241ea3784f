DROP INDEX IF EXISTS comb_dedup_expiry_brin;
CREATE INDEX comb_dedup_expiry ON comb_dedup (queue_id, created_at);
