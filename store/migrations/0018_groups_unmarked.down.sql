-- Back to a ready set that covers every group: mark what each group's
-- marking has not reached, then drop the column.
INSERT INTO comb_ready (partition_id, group_name, queue_id)
SELECT p.id, g.name, p.queue_id
FROM comb_groups g JOIN comb_partitions p ON p.queue_id = g.queue_id AND p.name > g.unmarked_after
WHERE g.unmarked_after IS NOT NULL AND p.next_offset > p.low_offset
ORDER BY p.id, g.name
ON CONFLICT DO NOTHING;
ALTER TABLE comb_groups DROP COLUMN unmarked_after;
