-- Frames record each message's encoding (JSON or bytes) in the low bits of
-- the data length, so a pop writes its reply without checking the bytes.
-- Segments written before this migration keep format 0 (plain lengths) and
-- are read as before; new segments are written with format 1. Adding a
-- column with a constant default rewrites nothing.
ALTER TABLE comb_segments ADD COLUMN frame_format smallint NOT NULL DEFAULT 0;
-- Likewise for dead letters: 0 unknown (before this migration), 1 JSON,
-- 2 bytes (domain.Encoding).
ALTER TABLE comb_dead_letters ADD COLUMN encoding smallint NOT NULL DEFAULT 0;
