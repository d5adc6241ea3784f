-- Back to a cursor where a group that starts at a time stands past the
-- oldest retained message: write each missing one at the first message
-- pushed at or after its time (or at the end), then drop the columns, so
-- that an older broker reads such a group where it is.
INSERT INTO comb_cursors (partition_id, group_name, queue_id, committed)
SELECT p.id, g.name, p.queue_id, s.start
FROM comb_groups g JOIN comb_partitions p ON p.queue_id = g.queue_id
CROSS JOIN LATERAL (SELECT coalesce((SELECT min(s.base_offset) FROM comb_segments s
    WHERE s.partition_id = p.id AND s.base_offset >= p.low_offset AND s.created_at >= g.from_time), p.next_offset) AS start) s
WHERE g.from_time IS NOT NULL AND s.start > p.low_offset
ORDER BY p.id, g.name
ON CONFLICT DO NOTHING;
ALTER TABLE comb_groups DROP COLUMN from_time;
ALTER TABLE comb_partitions DROP COLUMN high_created_at;
