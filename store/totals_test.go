package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// Totals reads every tenant's queues in one query, and its figures agree
// with Info's after pushes, pops, acks and a dead letter.
func TestTotalsAgreeWithInfo(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	a := domain.QueueRef{Tenant: "A", Name: "orders"}
	g := domain.Global("events")
	empty := domain.Global("empty")

	msgs := func(parts ...string) []domain.PushMessage {
		var out []domain.PushMessage
		for _, p := range parts {
			out = append(out, domain.PushMessage{Partition: p, Data: []byte(`1`), Encoding: domain.EncodingJSON})
		}
		return out
	}
	for _, r := range []domain.PushParams{
		{Queue: a, Messages: msgs("x", "x", "x", "y")},
		{Queue: g, Messages: msgs("p", "p", "p", "p", "p")},
	} {
		require.NoError(t, push(t, st, r)[0].Err)
	}
	_, err := st.Configure(ctx, empty, domain.ConfigPatch{})
	require.NoError(t, err)

	// Group "billing" on g: pops 3 of 5, completes 2, dead-letters the 3rd.
	got, err := st.Pop(ctx, domain.PopParams{Queue: g, Group: "billing", Max: 3, Partitions: 1})
	require.NoError(t, err)
	require.Len(t, got, 3)
	ackOutcome(t, st, domain.AckParams{Queue: g, Group: "billing", Acks: []domain.Ack{
		{Partition: "p", Offset: 1, Lease: got[1].Lease, Status: domain.AckCompleted},
	}})
	ackOutcome(t, st, domain.AckParams{Queue: g, Group: "billing", Acks: []domain.Ack{
		{Partition: "p", Offset: 2, Lease: got[2].Lease, Status: domain.AckDead},
	}})
	// Group "audit" on g pops 1 and holds its lease; on a, "audit" pops x's 3.
	_, err = st.Pop(ctx, domain.PopParams{Queue: g, Group: "audit", Max: 1, Partitions: 1})
	require.NoError(t, err)
	_, err = st.Pop(ctx, domain.PopParams{Queue: a, Group: "audit", Partition: "x", Max: 10, Partitions: 1})
	require.NoError(t, err)

	totals, err := st.Totals(ctx, 100)
	require.NoError(t, err)
	var refs []domain.QueueRef
	for _, qt := range totals {
		refs = append(refs, qt.Queue)
	}
	require.Equal(t, []domain.QueueRef{empty, g, a}, refs, "ordered by tenant, then name")

	for _, qt := range totals {
		info, err := st.Info(ctx, domain.InfoParams{Queue: qt.Queue, Limit: 1000})
		require.NoError(t, err)
		require.Equal(t, info.Messages, qt.Messages, qt.Queue)
		require.Equal(t, info.Bytes, qt.Bytes, qt.Queue)
		require.Equal(t, info.DeadLetters, qt.DeadLetters, qt.Queue)
		require.Len(t, qt.Groups, len(info.Groups), qt.Queue)
		require.EqualValues(t, len(info.Partitions), qt.Partitions, qt.Queue)
		var pushed int64
		for _, p := range info.Partitions {
			pushed += p.NextOffset
		}
		require.Equal(t, pushed, qt.Pushed, qt.Queue)
		for i, gi := range info.Groups {
			require.Equal(t, gi.Name, qt.Groups[i].Name)
			require.Equal(t, gi.Pending, qt.Groups[i].Pending, "%v %s", qt.Queue, gi.Name)
			require.Equal(t, gi.Leased, qt.Groups[i].Leased, "%v %s", qt.Queue, gi.Name)
		}
	}

	byRef := map[domain.QueueRef]int{}
	for i, qt := range totals {
		byRef[qt.Queue] = i
	}
	ev := totals[byRef[g]]
	require.Equal(t, int64(5), ev.Pushed)
	require.Equal(t, int64(1), ev.DeadLetters)
	require.Equal(t, []store.GroupTotals{
		{Name: "audit", Popped: 1, Settled: 0, Pending: 5, Leased: 1},
		{Name: "billing", Popped: 3, Settled: 3, Pending: 2, Leased: 0},
	}, ev.Groups, "billing settled 0-1 and dead-lettered 2; audit holds offset 0")
	or := totals[byRef[a]]
	require.Equal(t, int64(4), or.Pushed)
	require.Equal(t, []store.GroupTotals{{Name: "audit", Popped: 3, Settled: 0, Pending: 4, Leased: 1}}, or.Groups)
}

// Totals caps the queues it reads, and refuses a limit below one.
func TestTotalsLimit(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	for _, name := range []string{"c", "a", "b"} {
		_, err := st.Configure(ctx, domain.Global(name), domain.ConfigPatch{})
		require.NoError(t, err)
	}
	totals, err := st.Totals(ctx, 2)
	require.NoError(t, err)
	require.Len(t, totals, 2)
	require.Equal(t, "a", totals[0].Queue.Name)
	require.Equal(t, "b", totals[1].Queue.Name)
	require.Empty(t, totals[0].Groups)
	require.Zero(t, totals[0].Pushed)

	_, err = st.Totals(ctx, 0)
	require.ErrorIs(t, err, domain.ErrInvalid)
}
