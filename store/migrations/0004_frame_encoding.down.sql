-- Segments of format 1 would be misread by the code before 0004: refuse to
-- go back while any exist.
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM comb_segments WHERE frame_format <> 0) THEN
        RAISE EXCEPTION 'comb_segments holds frames of format 1; the code before migration 0004 cannot read them';
    END IF;
END $$;
ALTER TABLE comb_segments DROP COLUMN frame_format;
ALTER TABLE comb_dead_letters DROP COLUMN encoding;
