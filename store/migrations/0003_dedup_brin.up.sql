-- The dedup table gets one row per message: keep its write cost to the
-- primary key. Rows arrive in created_at order, so a BRIN index finds the
-- expired ones for the sweeper at a fraction of a btree's insert cost.
DROP INDEX IF EXISTS comb_dedup_expiry;
CREATE INDEX comb_dedup_expiry_brin ON comb_dedup USING brin (created_at);
