-- Back to a cursor per partition and group: make every missing one, at
-- the partition's oldest retained message (where a missing cursor was).
INSERT INTO comb_cursors (partition_id, group_name, queue_id, committed)
SELECT p.id, g.name, p.queue_id, p.low_offset
FROM comb_partitions p JOIN comb_groups g ON g.queue_id = p.queue_id
ORDER BY p.id, g.name
ON CONFLICT DO NOTHING;
COMMENT ON TABLE comb_cursors IS NULL;
