-- Retention finds its work by time, not by reading every partition:
-- low_created_at is no later than the push time of a partition's oldest
-- retained segment, NULL while it retains none. A push into a partition
-- that retains nothing sets it; the sweeper moves it with low_offset. The
-- sweeper reads, per queue with retention, only the partitions whose
-- low_created_at is old enough, through the index. The column changes only
-- when a partition goes from empty to not and when the sweeper deletes, so
-- every other push keeps its HOT update.
ALTER TABLE comb_partitions ADD COLUMN low_created_at timestamptz;
-- Partitions that retain messages now: checked at the next sweep, which
-- sets the real time.
UPDATE comb_partitions SET low_created_at = '-infinity' WHERE next_offset > low_offset;
CREATE INDEX comb_partitions_low_created ON comb_partitions (queue_id, low_created_at);
