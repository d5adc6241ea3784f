package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

// Two tenants' queues of one name are two queues: their messages,
// settings, groups, dead letters, lists and deletes are their own.
func TestTenantsHaveTheirOwnQueues(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	a := domain.QueueRef{Tenant: "A", Name: "orders"}
	b := domain.QueueRef{Tenant: "B", Name: "orders"}
	g := domain.Global("orders")
	one := int64(1)

	_, err := st.Configure(ctx, a, domain.ConfigPatch{MaxAttempts: &one})
	require.NoError(t, err)
	for i, q := range []domain.QueueRef{a, b, g} {
		outs := push(t, st, domain.PushParams{Queue: q, Messages: []domain.PushMessage{
			{Partition: "p", Data: []byte{byte('a' + i)}, Encoding: domain.EncodingBinary},
		}})
		require.NoError(t, outs[0].Err)
		require.Equal(t, int64(0), outs[0].Results[0].Offset, "each tenant's partition starts at offset 0")
	}
	ca, err := st.Info(ctx, domain.InfoParams{Queue: a, Limit: 1000})
	require.NoError(t, err)
	cb, err := st.Info(ctx, domain.InfoParams{Queue: b, Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, int64(1), ca.Config.MaxAttempts)
	require.Equal(t, domain.DefaultQueueConfig().MaxAttempts, cb.Config.MaxAttempts, "A's configure is not B's")

	for i, q := range []domain.QueueRef{a, b, g} {
		msgs, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10, Partitions: 1})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, []byte{byte('a' + i)}, msgs[0].Data, "%s pops its own message", q)
		out := ackOutcome(t, st, domain.AckParams{Queue: q, Group: "g", Acks: []domain.Ack{
			{Partition: "p", Offset: 0, Lease: msgs[0].Lease, Status: domain.AckDead},
		}})
		require.NoError(t, out.Err)
		require.True(t, out.Results[0].OK)
		// A lease of one tenant's queue settles nothing in another's.
		if q != g {
			other := ackOutcome(t, st, domain.AckParams{Queue: g, Group: "g", Acks: []domain.Ack{
				{Partition: "p", Offset: 0, Lease: msgs[0].Lease, Status: domain.AckCompleted},
			}})
			require.NoError(t, other.Err)
			require.False(t, other.Results[0].OK, "%s's lease used on the global queue", q)
		}
	}
	for _, q := range []domain.QueueRef{a, b, g} {
		dls, _, err := st.DeadLetters(ctx, domain.DLQParams{Queue: q, Limit: 10})
		require.NoError(t, err)
		require.Len(t, dls, 1, "%s has its own dead letter", q)
	}

	for _, tenant := range []string{"A", "B", ""} {
		page, err := st.List(ctx, domain.ListParams{Tenant: tenant, Limit: 1000})
		l := page.Queues
		require.NoError(t, err)
		require.Len(t, l, 1, "tenant %q lists its own queue only", tenant)
		require.Equal(t, "orders", l[0].Name)
	}
	l, err := st.List(ctx, domain.ListParams{Tenant: "C", Limit: 1000})
	require.NoError(t, err)
	require.Empty(t, l.Queues)

	require.NoError(t, st.Delete(ctx, a))
	_, err = st.Info(ctx, domain.InfoParams{Queue: a, Limit: 1000})
	require.ErrorIs(t, err, domain.ErrNotFound)
	for _, q := range []domain.QueueRef{b, g} {
		info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: 1000})
		require.NoError(t, err, "deleting A's queue leaves %s", q)
		require.Equal(t, int64(1), info.Messages)
	}
}
