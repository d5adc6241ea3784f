-- Back to a cursor where a group that starts at the end stands short of
-- the end: write each missing one at its partition's end, then drop the
-- flag, so that an older broker reads such a group where it is.
INSERT INTO comb_cursors (partition_id, group_name, queue_id, committed)
SELECT p.id, g.name, p.queue_id, p.next_offset
FROM comb_groups g JOIN comb_partitions p ON p.queue_id = g.queue_id
WHERE g.from_end AND p.next_offset > p.low_offset
ORDER BY p.id, g.name
ON CONFLICT DO NOTHING;
ALTER TABLE comb_groups DROP COLUMN from_end;
