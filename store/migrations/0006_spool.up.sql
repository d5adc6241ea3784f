-- The drain of a bridge's disk spool (package spool): per spool file, the
-- sequence number of the last record stored. The drain writes it in the
-- transaction that stores the records, so a crash in the middle of a drain
-- stores nothing twice. One row per file, deleted once the file is gone.
CREATE TABLE comb_spool_applied (
    file_id    text PRIMARY KEY,
    spool_id   text NOT NULL,
    seq        bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX comb_spool_applied_spool ON comb_spool_applied (spool_id);
