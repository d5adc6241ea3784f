package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

// TestPeekPastRetention: a peek from below the partition's low offset
// starts at the low offset, and a peek by the id of a message retention
// removed is a 404 that says so.
func TestPeekPastRetention(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{CompletedRetentionS: i64(1), DedupWindowS: i64(600)})
	pushIDs(t, st, "q", domain.PushMessage{Partition: "p", ID: "a", Data: []byte("1")},
		domain.PushMessage{Partition: "p", ID: "b", Data: []byte("2")})
	pushIDs(t, st, "q", domain.PushMessage{Partition: "p", ID: "c", Data: []byte("3")})
	got, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 2})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.True(t, ack(t, st, "q", "default", domain.Ack{Partition: "p", Offset: 1, Lease: got[0].Lease})[0].OK)
	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		return s.Segments > 0
	}, 10*time.Second, 100*time.Millisecond)

	page, err := st.Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: "p", From: 0, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	require.Equal(t, int64(2), page.Messages[0].Offset, "starts at the low offset")
	require.Equal(t, "c", page.Messages[0].ID)
	require.Equal(t, int64(-1), page.Next)

	_, err = st.Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: "p", ID: "a", Limit: 1})
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.ErrorContains(t, err, "removed by retention")
	page, err = st.Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: "p", ID: "c", Limit: 1})
	require.NoError(t, err)
	require.Equal(t, int64(2), page.Messages[0].Offset)

	// From past the end, and a partition never pushed to: empty, no next.
	for _, pk := range []domain.PeekParams{{Partition: "p", From: 1 << 62, Limit: 1000}, {Partition: "none", Limit: 5}} {
		pk.Queue = domain.Global("q")
		page, err = st.Peek(ctx, pk)
		require.NoError(t, err)
		require.Empty(t, page.Messages)
		require.Equal(t, int64(-1), page.Next)
	}
}
