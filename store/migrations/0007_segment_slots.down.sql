-- Back to one plain table; every segment is kept.
CREATE TABLE comb_segments_plain (
    partition_id  bigint NOT NULL,
    base_offset   bigint NOT NULL,
    count         integer NOT NULL,
    bytes         integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    payload       bytea NOT NULL,
    frame_format  smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_id, base_offset)
);
ALTER TABLE comb_segments_plain ALTER COLUMN payload SET STORAGE EXTERNAL;
INSERT INTO comb_segments_plain (partition_id, base_offset, count, bytes, created_at, payload, frame_format)
SELECT partition_id, base_offset, count, bytes, created_at, payload, frame_format FROM comb_segments;
DROP TABLE comb_segments;
ALTER TABLE comb_segments_plain RENAME TO comb_segments;
ALTER INDEX comb_segments_plain_pkey RENAME TO comb_segments_pkey;
