package comb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

// TestPopNamespace: PopNamespace draws from the queues under a namespace,
// each Delivery names its queue, and Ack and Renew work on that queue; a
// Pop's deliveries name the queue popped.
func TestPopNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, c := b.ctx, b.client
	for _, q := range []string{"acct.in", "acct.out", "acct"} {
		_, err := c.Push(ctx, q, []comb.Message{{Partition: "p", Data: []byte(`"` + q + `"`)}})
		require.NoError(t, err)
	}

	got, err := c.PopNamespace(ctx, "acct", comb.PopOptions{Group: "g", Max: 10})
	require.NoError(t, err)
	require.Len(t, got, 2)
	queues := map[string]bool{}
	for _, d := range got {
		queues[d.Queue] = true
		require.Equal(t, `"`+d.Queue+`"`, string(d.Data))
		rn, err := c.Renew(ctx, d.Queue, []string{d.Lease}, time.Minute)
		require.NoError(t, err)
		require.True(t, rn[0].OK, "renew on %s", d.Queue)
		res, err := c.Ack(ctx, d.Queue, "g", []comb.Ack{{Partition: d.Partition, Offset: d.Offset, Lease: d.Lease}})
		require.NoError(t, err)
		require.NoError(t, res[0].Err())
	}
	require.Equal(t, map[string]bool{"acct.in": true, "acct.out": true}, queues)

	again, err := c.PopNamespace(ctx, "acct", comb.PopOptions{Group: "g", Wait: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Empty(t, again)
	none, err := c.PopNamespace(ctx, "nobody", comb.PopOptions{})
	require.NoError(t, err)
	require.NotNil(t, none)
	require.Empty(t, none)

	single, err := c.Pop(ctx, "acct", comb.PopOptions{Group: "g"})
	require.NoError(t, err)
	require.Len(t, single, 1)
	require.Equal(t, "acct", single[0].Queue, "a pop's deliveries name the queue popped")

	_, err = c.PopNamespace(ctx, "acct", comb.PopOptions{Partition: "p"})
	require.ErrorIs(t, err, comb.ErrBadRequest)
	require.ErrorContains(t, err, "partition")
	_, err = c.PopNamespace(ctx, "acct.>", comb.PopOptions{})
	require.ErrorIs(t, err, comb.ErrBadRequest)
}
