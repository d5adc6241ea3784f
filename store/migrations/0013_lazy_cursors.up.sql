-- Lazy cursors: a group has a cursor on a partition only once it has
-- needed one. A missing cursor is one at offset 0 with nothing leased and
-- no attempts, which every reader takes as the partition's oldest
-- retained message (greatest(committed, low_offset)). A new group that
-- starts there writes no cursor; a pop makes the cursors of the
-- partitions where it finds messages (store/pop.go, makeMissingCursors).
-- No table changes: this marks the version from which rows may be
-- missing. A broker older than it expects a cursor per partition and
-- group: its pops would skip the partitions where one is missing, and its
-- retention would not wait for those groups. Do not mix brokers of both
-- sides of this migration (docs/operations.md).
COMMENT ON TABLE comb_cursors IS
    'One row per partition and group once the group has needed it; a missing row is a cursor at offset 0 (migration 0013).';
