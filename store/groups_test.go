package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

func TestGroupsListing(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("q")
	_, err := st.Groups(ctx, q)
	require.ErrorIs(t, err, domain.ErrNotFound)

	configure(t, st, "q", domain.ConfigPatch{})
	gs, err := st.Groups(ctx, q)
	require.NoError(t, err)
	require.Empty(t, gs)

	pushN(t, st, "q", "a", 0, 3)
	pushN(t, st, "q", "b", 0, 2)
	// "done" completes everything; "busy" holds a lease on a and
	// dead-letters b's first message.
	done, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "done", Max: 10, Partitions: 2})
	require.NoError(t, err)
	require.Len(t, done, 5)
	for _, m := range []domain.Message{done[2], done[4]} {
		require.True(t, ack(t, st, "q", "done", domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})[0].OK)
	}
	busy, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "busy", Partition: "a", Max: 10})
	require.NoError(t, err)
	require.Len(t, busy, 3)
	b, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "busy", Partition: "b", Max: 1})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "busy", domain.Ack{Partition: "b", Offset: b[0].Offset, Lease: b[0].Lease, Status: domain.AckDead})[0].OK)

	gs, err = st.Groups(ctx, q)
	require.NoError(t, err)
	require.Len(t, gs, 2)
	require.Equal(t, domain.GroupState{Name: "busy", Pending: 4, Leased: 1, Dead: 1, OldestPendingAge: gs[0].OldestPendingAge}, gs[0])
	require.Positive(t, gs[0].OldestPendingAge)
	require.Less(t, gs[0].OldestPendingAge, time.Minute)
	require.Equal(t, domain.GroupState{Name: "done"}, gs[1], "nothing pending: age 0")

	// The same figures as the metrics' statement, which it shares.
	figs, err := st.GroupFigures(ctx, store.GroupFiguresParams{})
	require.NoError(t, err)
	var found int
	for _, f := range figs {
		if f.Queue == "q" && f.Tenant == "" {
			require.Equal(t, gs[found].Pending, f.Depth)
			found++
		}
	}
	require.Equal(t, 2, found)
}

func TestDeleteGroup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("q")
	require.ErrorIs(t, st.DeleteGroup(ctx, q, "g"), domain.ErrNotFound, "no queue")
	pushN(t, st, "q", "p", 0, 3)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 1})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "g", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckDead})[0].OK)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 1})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	_, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "other", Max: 1})
	require.NoError(t, err)
	require.ErrorIs(t, st.DeleteGroup(ctx, q, "nope"), domain.ErrNotFound, "no group")
	// The same name in another tenant is another queue.
	require.ErrorIs(t, st.DeleteGroup(ctx, domain.QueueRef{Tenant: "acme", Name: "q"}, "g"), domain.ErrNotFound)

	require.NoError(t, st.DeleteGroup(ctx, q, "g"))
	var groups, cursors, dead int
	require.NoError(t, st.Pool().QueryRow(ctx, `
		SELECT (SELECT count(*) FROM comb_groups WHERE name = 'g'),
		       (SELECT count(*) FROM comb_cursors WHERE group_name = 'g'),
		       (SELECT count(*) FROM comb_dead_letters WHERE group_name = 'g')`).Scan(&groups, &cursors, &dead))
	require.Zero(t, groups+cursors+dead, "row, cursors (with their leases) and dead letters go")
	require.ErrorIs(t, st.DeleteGroup(ctx, q, "g"), domain.ErrNotFound, "twice")

	// Its old lease settles nothing; a pop under its name starts it anew.
	require.False(t, ack(t, st, "q", "g", domain.Ack{Partition: "p", Offset: ms[0].Offset, Lease: ms[0].Lease})[0].OK)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, datas(ms))
	gs, err := st.Groups(ctx, q)
	require.NoError(t, err)
	require.Equal(t, []string{"g", "other"}, []string{gs[0].Name, gs[1].Name})
	require.Zero(t, gs[0].Dead)
}

// TestDeleteGroupLetsRetentionPass: an abandoned group holds back
// completed retention until it is deleted.
func TestDeleteGroupLetsRetentionPass(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("q")
	configure(t, st, "q", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	pushN(t, st, "q", "p", 0, 3)
	_, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "abandoned", Max: 1})
	require.NoError(t, err)
	live, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "live", Max: 10})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "live", domain.Ack{Partition: "p", Offset: 2, Lease: live[0].Lease})[0].OK)

	// Past the retention time, the abandoned group still holds it back.
	segmentsOlderThanASecond(t, st)
	s, err := st.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, s.Messages)

	require.NoError(t, st.DeleteGroup(ctx, q, "abandoned"))
	s, err = st.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), s.Messages)
	info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: 1000})
	require.NoError(t, err)
	require.Zero(t, info.Messages)
}

// TestDeleteGroupSeenByAnotherStore: a store (bridge) that knew the group
// looks again within its cache TTL and starts the group anew.
func TestDeleteGroupSeenByAnotherStore(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	open := func() *store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := store.Open(ctx, url, store.Options{MaxConns: 4, QueueCacheTTL: 100 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		require.NoError(t, st.Migrate(ctx))
		return st
	}
	a, b := open(), open()
	ctx := ctxT(t)
	q := domain.Global("q")
	pushN(t, a, "q", "p", 0, 2)
	ms, err := b.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10})
	require.NoError(t, err)
	require.True(t, ack(t, b, "q", "g", domain.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease})[0].OK)
	require.NoError(t, a.DeleteGroup(ctx, q, "g"))
	require.Eventually(t, func() bool {
		ms, err := b.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10, AutoAck: true})
		require.NoError(t, err)
		return len(ms) == 2
	}, 10*time.Second, 50*time.Millisecond, "b recreates the group from the start")
}

// segmentsOlderThanASecond waits until every segment is older than a
// second: past a completed_retention_s of 1.
func segmentsOlderThanASecond(t *testing.T, st *store.Store) {
	t.Helper()
	require.Eventually(t, func() bool {
		var old bool
		require.NoError(t, st.Pool().QueryRow(ctxT(t), `SELECT bool_and(created_at < now() - interval '1 second') FROM comb_segments`).Scan(&old))
		return old
	}, 10*time.Second, 50*time.Millisecond)
}
