package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

// TestGroupFromATime: a group made from a time (a pop's from) writes no
// cursor, and stands on each partition at the first message pushed at or
// after it (from_time, migration 0019): its figures count only what it has
// ahead; a seek of one partition where it has no cursor puts it there and
// nowhere else; its pops get what it has ahead, on a partition made after
// it too; and retention passes what it skipped.
func TestGroupFromATime(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("ft")
	pushN(t, st, "ft", "a", 0, 3)
	pushN(t, st, "ft", "b", 0, 2)
	pushN(t, st, "ft", "e", 0, 2)
	var at time.Time
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT now()`).Scan(&at))
	pushN(t, st, "ft", "b", 2, 1)
	newGroup(t, st, "ft", "t", domain.Start{Kind: domain.StartTime, Time: at})
	newGroup(t, st, "ft", "n", domain.Start{Kind: domain.StartNew})
	require.Zero(t, groupCursors(t, st, "ft", "t"))

	info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []domain.GroupInfo{{Name: "n"}, {Name: "t", Pending: 1}}, info.Groups)
	totals, err := st.Totals(ctx, 10)
	require.NoError(t, err)
	require.Len(t, totals, 1)
	require.Len(t, totals[0].Groups, 2)
	tt := totals[0].Groups[1]
	require.Equal(t, "t", tt.Name)
	require.Equal(t, [2]int64{1, 7}, [2]int64{tt.Pending, tt.Settled}, "b's third ahead; a's 3, b's first 2 and e's 2 behind")

	_, err = st.Seek(ctx, domain.SeekParams{Queue: q, Group: "t", Partition: "e", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	pushN(t, st, "ft", "c", 0, 1) // a partition made after the group
	require.Equal(t, []string{"b/2", "c/0", "e/0", "e/1"}, drain(t, st, q, "t"))
	require.Zero(t, count(t, st, uncoveredSQL))

	configure(t, st, "ft", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	sweepUntil(t, st, "ft", 1, "all but c's message, which n has not popped: a's three too, where t stands at the end with no cursor")
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_cursors c JOIN comb_partitions p ON p.id = c.partition_id
	                              WHERE c.group_name = 't' AND p.name = 'a'`))
}

// TestGroupsFromTimeDownMigration: 0019's down file writes the cursors of
// a group from a time where they stand past the oldest retained message,
// so that a broker older than it, which reads a missing cursor at the
// oldest retained message, delivers nothing the group skipped.
func TestGroupsFromTimeDownMigration(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	at := pushAroundATime(t, st, "down")
	newGroup(t, st, "down", "t", domain.Start{Kind: domain.StartTime, Time: at})
	require.Zero(t, groupCursors(t, st, "down", "t"))
	tx := downMigrated(t, st, "0019_groups_from_time.down.sql")
	rows, err := tx.Query(ctx, `SELECT p.name, c.committed FROM comb_cursors c JOIN comb_partitions p ON p.id = c.partition_id
	                            WHERE c.group_name = 't' ORDER BY p.name`)
	require.NoError(t, err)
	got := map[string]int64{}
	var name string
	var committed int64
	_, err = pgx.ForEachRow(rows, []any{&name, &committed}, func() error { got[name] = committed; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"both": 2, "old": 3}, got)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
	    WHERE table_schema = current_schema() AND column_name IN ('from_time', 'high_created_at')`).Scan(&n))
	require.Zero(t, n)
}
