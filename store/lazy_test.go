package store_test

import (
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// Cursors are made lazily: a group has a cursor on a partition only once a
// pop found messages there (or a seek or its start put it past the oldest
// retained message); a missing cursor is at the oldest retained message.

// groupCursors counts the cursor rows group has on queue.
func groupCursors(t *testing.T, st *store.Store, queue, group string) int {
	t.Helper()
	return count(t, st, `SELECT count(*) FROM comb_cursors c JOIN comb_queues q ON q.id = c.queue_id
	                     WHERE q.name = $1 AND c.group_name = $2`, queue, group)
}

// newGroup makes group on queue without popping a message: a pop of a
// partition that does not exist makes the group and nothing else.
func newGroup(t *testing.T, st *store.Store, queue, group string, from domain.Start) {
	t.Helper()
	ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global(queue), Group: group, Partition: "no-such-partition", From: from})
	require.NoError(t, err)
	require.Empty(t, ms)
}

// emptied pushes one message to each of n partitions "p<i>" of queue and
// lets retention take them all (max_age_s), so the partitions exist and
// retain nothing; max_age_s is off again after.
func emptied(t *testing.T, st *store.Store, queue string, n int) {
	t.Helper()
	r := domain.PushParams{Queue: domain.Global(queue)}
	for i := range n {
		r.Messages = append(r.Messages, domain.PushMessage{Partition: "p" + strconv.Itoa(i), Data: []byte(`0`), Encoding: domain.EncodingJSON})
	}
	require.NoError(t, push(t, st, r)[0].Err)
	configure(t, st, queue, domain.ConfigPatch{MaxAgeS: i64(1)})
	sweepUntil(t, st, queue, 0)
	configure(t, st, queue, domain.ConfigPatch{MaxAgeS: i64(0)})
}

// sweepUntil sweeps until queue retains messages messages (retention
// counts from each segment's age in whole seconds, so it takes a few).
func sweepUntil(t *testing.T, st *store.Store, queue string, messages int64, msgAndArgs ...any) {
	t.Helper()
	ctx := ctxT(t)
	require.Eventually(t, func() bool {
		_, err := st.Sweep(ctx)
		require.NoError(t, err)
		info, err := st.Info(ctx, domain.InfoParams{Queue: domain.Global(queue), Limit: 1})
		require.NoError(t, err)
		return info.Messages == messages
	}, 20*time.Second, 100*time.Millisecond, msgAndArgs...)
}

// TestNewGroupMakesCursorsWhereMessagesAre: a group made on a queue of 100
// partitions, 5 of them with messages, writes no cursor; its pops make
// the 5 where they find messages, and get them in their first call. A
// group that starts past the newest message has cursors only where
// messages are retained (past them), and gets what is pushed anywhere
// after it.
func TestNewGroupMakesCursorsWhereMessagesAre(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("lazy")
	emptied(t, st, "lazy", 100)
	for i := range 5 {
		pushN(t, st, "lazy", "p"+strconv.Itoa(i*20), 1, 2)
	}

	newGroup(t, st, "lazy", "g", domain.Start{})
	require.Zero(t, groupCursors(t, st, "lazy", "g"))
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 100, Partitions: 100})
	require.NoError(t, err)
	require.Len(t, ms, 10, "the first pop leases what the cursors it made cover")
	require.Equal(t, 5, groupCursors(t, st, "lazy", "g"))

	// A group from the end writes no cursor either (its missing ones are
	// at the end, migration 0017), finds nothing, and the pushes after it
	// write its cursors where they store: its first pop gets them all.
	newGroup(t, st, "lazy", "n", domain.Start{Kind: domain.StartNew})
	require.Zero(t, groupCursors(t, st, "lazy", "n"))
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 100, Partitions: 100})
	require.NoError(t, err)
	require.Empty(t, ms)
	info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []domain.GroupInfo{{Name: "g", Pending: 10, Leased: 5}, {Name: "n"}}, info.Groups,
		"n is behind nowhere")
	pushN(t, st, "lazy", "p50", 7, 1)
	pushN(t, st, "lazy", "p0", 8, 1)
	require.Equal(t, 2, groupCursors(t, st, "lazy", "n"))
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 100, Partitions: 100})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"7", "8"}, datas(ms))

	// g meets p50's message too, and no cursor was made for the 94
	// partitions it never found anything in.
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 100, Partitions: 100})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, "7", string(ms[0].Data))
	require.Equal(t, 6, groupCursors(t, st, "lazy", "g"))
}

// TestPopMakesCursorsOnEveryPath: a pop of a named partition, of
// candidates, of any partition (the ready set), and an auto-ack pop
// bounded in bytes (which keeps its transaction open) each get the
// messages of a partition where the group has no cursor yet, in one call.
func TestPopMakesCursorsOnEveryPath(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("paths")
	for _, p := range []string{"a", "b", "c", "d"} {
		pushN(t, st, "paths", p, 0, 2)
	}
	newGroup(t, st, "paths", "g", domain.Start{})
	require.Zero(t, groupCursors(t, st, "paths", "g"))

	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Partition: "a", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(ms))
	require.Equal(t, "a", ms[0].Partition)

	res, err := st.PopReport(ctx, domain.PopParams{Queue: q, Group: "g", Candidates: []string{"b"}, Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Messages, 2)
	require.Equal(t, "b", res.Messages[0].Partition)

	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 2, Partitions: 1})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	first := ms[0].Partition
	require.Contains(t, []string{"c", "d"}, first)

	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10, AutoAck: true, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.NotEqual(t, first, ms[0].Partition)
	require.Equal(t, 4, groupCursors(t, st, "paths", "g"))

	// Everything is out: leased (a, b, and c or d) or settled.
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10, Partitions: 10})
	require.NoError(t, err)
	require.Empty(t, ms)
}

// TestFiguresCountGroupsWithoutCursors: a group's backlog counts the
// partitions where it has no cursor yet, in every reader of it.
func TestFiguresCountGroupsWithoutCursors(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("figs")
	for _, p := range []string{"a", "b", "c"} {
		pushN(t, st, "figs", p, 0, 2)
	}
	newGroup(t, st, "figs", "g", domain.Start{})
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Partition: "a", Max: 1})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.True(t, ack(t, st, "figs", "g", domain.Ack{Partition: "a", Offset: 0, Lease: ms[0].Lease})[0].OK)
	require.Equal(t, 1, groupCursors(t, st, "figs", "g"))

	groups, err := st.Groups(ctx, q)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, int64(5), groups[0].Pending)
	require.Positive(t, groups[0].OldestPendingAge)

	info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []domain.GroupInfo{{Name: "g", Pending: 5}}, info.Groups)

	list, err := st.List(ctx, domain.ListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list.Queues, 1)
	require.Equal(t, int64(5), list.Queues[0].Pending)

	totals, err := st.Totals(ctx, 10)
	require.NoError(t, err)
	require.Len(t, totals, 1)
	require.Len(t, totals[0].Groups, 1)
	require.Equal(t, store.GroupTotals{Name: "g", Popped: 1, Settled: 1, Pending: 5}, totals[0].Groups[0])

	figs, err := st.GroupFigures(ctx, store.GroupFiguresParams{})
	require.NoError(t, err)
	require.Len(t, figs, 1)
	require.Equal(t, int64(5), figs[0].Depth)
}

// TestRetentionWaitsForAGroupWithoutCursor: completed retention keeps a
// partition's messages while a group has no cursor there (it has
// completed nothing), however far the others are.
func TestRetentionWaitsForAGroupWithoutCursor(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("ret")
	configure(t, st, "ret", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	pushN(t, st, "ret", "a", 0, 3)
	newGroup(t, st, "ret", "idle", domain.Start{})
	live, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "live", Max: 10})
	require.NoError(t, err)
	require.Len(t, live, 3)
	require.True(t, ack(t, st, "ret", "live", domain.Ack{Partition: "a", Offset: 2, Lease: live[0].Lease})[0].OK)
	require.Zero(t, groupCursors(t, st, "ret", "idle"))

	segmentsOlderThanASecond(t, st)
	s, err := st.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, s.Messages)

	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "idle", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, datas(ms))
	require.True(t, ack(t, st, "ret", "idle", domain.Ack{Partition: "a", Offset: 2, Lease: ms[0].Lease})[0].OK)
	s, err = st.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), s.Messages)
}

// TestSeekPlacesGroupsWithoutCursors: a seek moves a group to where it
// says on every partition, those where it has no cursor too, and counts
// them all.
func TestSeekPlacesGroupsWithoutCursors(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("seek")
	for _, p := range []string{"a", "b"} {
		pushN(t, st, "seek", p, 0, 2)
	}
	newGroup(t, st, "seek", "g", domain.Start{})
	n, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: "g", To: domain.Start{Kind: domain.StartNew}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, groupCursors(t, st, "seek", "g"), "to the end of every partition: a group from the end, with no cursor")
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10, Partitions: 10})
	require.NoError(t, err)
	require.Empty(t, ms)

	n, err = st.Seek(ctx, domain.SeekParams{Queue: q, Group: "g", Partition: "b", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10, Partitions: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(ms))
	require.Equal(t, "b", ms[0].Partition)
}

// TestDeleteGroupBesidePopsLeavesNoCursor: pops that make a group's
// cursors while the group is deleted leave none behind (a cursor without
// its group would hold completed retention back and keep its partition in
// the ready set for good).
func TestDeleteGroupBesidePopsLeavesNoCursor(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("orphans")
	r := domain.PushParams{Queue: q}
	for i := range 300 {
		r.Messages = append(r.Messages, domain.PushMessage{Partition: "p" + strconv.Itoa(i), Data: []byte(`0`), Encoding: domain.EncodingJSON})
	}
	require.NoError(t, push(t, st, r)[0].Err)
	for i := range 30 {
		g := "g" + strconv.Itoa(i)
		newGroup(t, st, "orphans", g, domain.Start{})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: g, Max: 1, Partitions: 1})
				require.NoError(t, err)
			})
		}
		require.NoError(t, st.DeleteGroup(ctx, q, g))
		wg.Wait()
		// A pop that made the group again after its delete left it with
		// its cursors; delete that one too.
		if err := st.DeleteGroup(ctx, q, g); err != nil {
			require.ErrorIs(t, err, domain.ErrNotFound)
		}
	}
	require.Zero(t, count(t, st, orphanCursorsSQL))
}

// TestLazyCursorsDownMigration: the down file of migration 0013 gives
// every group a cursor on every partition, where the missing one was, so
// that a broker older than it finds what it expects.
func TestLazyCursorsDownMigration(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	for _, p := range []string{"a", "b", "c"} {
		pushN(t, st, "down", p, 0, 2)
	}
	newGroup(t, st, "down", "g", domain.Start{})
	newGroup(t, st, "down", "n", domain.Start{Kind: domain.StartNew})
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("down"), Group: "g", Partition: "a", Max: 10, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, 1, groupCursors(t, st, "down", "g"))

	// Down files run newest first: 0017's writes n's cursors at the end.
	for _, f := range []string{"0018_groups_unmarked.down.sql", "0017_groups_from_end.down.sql", "0013_lazy_cursors.down.sql"} {
		down, err := os.ReadFile("migrations/" + f)
		require.NoError(t, err)
		_, err = st.Pool().Exec(ctx, string(down))
		require.NoError(t, err, f)
	}
	require.Equal(t, 3, groupCursors(t, st, "down", "g"))
	require.Equal(t, 3, groupCursors(t, st, "down", "n"))
	rows, err := st.Pool().Query(ctx, `SELECT committed FROM comb_cursors WHERE group_name = 'g' ORDER BY partition_id`)
	require.NoError(t, err)
	committed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{2, 0, 0}, committed)
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_cursors WHERE group_name = 'n' AND committed <> 2`))
}

// A group that starts at the end marks no partition ready, and reads no
// partition to find that out: it writes only its cursors.
func TestGroupFromTheEndMarksNothingReady(t *testing.T) {
	t.Parallel()
	var trips roundTrips
	st := openTraced(t, testURL(t), &trips)
	pushTo(t, st, "q", "a", "b")
	trips.reset()
	newGroup(t, st, "q", "new", domain.Start{Kind: domain.StartNew})
	for _, q := range trips.sql {
		require.NotContains(t, q, "INSERT INTO comb_ready", "no ready row to look for")
	}
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = 'new'`))
	pushTo(t, st, "q", "a")
	ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global("q"), Group: "new", Max: 10, Partitions: 10, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 1, "the message pushed after it, only")
	require.Equal(t, int64(1), ms[0].Offset)
}
