package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

func msg(partition, id, data string) domain.PushMessage {
	return domain.PushMessage{Partition: partition, ID: id, Data: []byte(data), Encoding: domain.EncodingJSON}
}

// pending returns how many messages of queue group has not completed.
func pending(t *testing.T, st *store.Store, queue, group string) int64 {
	t.Helper()
	info, err := st.Info(ctxT(t), domain.InfoParams{Queue: domain.Global(queue), Limit: 1000})
	require.NoError(t, err)
	for _, g := range info.Groups {
		if g.Name == group {
			return g.Pending
		}
	}
	t.Fatalf("queue %s has no group %s", queue, group)
	return 0
}

// retained returns how many messages queue holds.
func retained(t *testing.T, st *store.Store, queue string) int64 {
	t.Helper()
	info, err := st.Info(ctxT(t), domain.InfoParams{Queue: domain.Global(queue), Limit: 1000})
	require.NoError(t, err)
	return info.Messages
}

func TestTxnAcksAndPushesTogether(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "in", "p", 0, 3)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("in"), Group: "g", Max: 3})
	require.NoError(t, err)
	require.Len(t, ms, 3)

	res, err := st.Txn(ctx, domain.TxnParams{
		Acks: []domain.TxnAck{{Queue: domain.Global("in"), Group: "g", Ack: domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease}}},
		Push: []domain.PushParams{
			{Queue: domain.Global("out"), Messages: []domain.PushMessage{msg("a", "", "1"), msg("a", "", "2")}},
			{Queue: domain.Global("side"), Messages: []domain.PushMessage{msg("s", "", "3")}},
		},
	})
	require.NoError(t, err)
	require.Len(t, res.Acks, 1)
	require.True(t, res.Acks[0].OK)
	require.Equal(t, int64(3), res.Acks[0].Settled)
	require.Equal(t, [][]domain.PushResult{
		{{Partition: "a", Offset: 0, Status: domain.Stored}, {Partition: "a", Offset: 1, Status: domain.Stored}},
		{{Partition: "s", Offset: 0, Status: domain.Stored}},
	}, res.Push)

	require.Zero(t, pending(t, st, "in", "g"))
	got, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("out"), Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2"}, datas(got))
	require.Equal(t, int64(1), retained(t, st, "side"))

	// Acks alone, and pushes alone, are transactions too.
	pushN(t, st, "in", "p", 3, 1)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("in"), Group: "g"})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	res, err = st.Txn(ctx, domain.TxnParams{Acks: []domain.TxnAck{{Queue: domain.Global("in"), Group: "g", Ack: domain.Ack{Partition: "p", Offset: 3, Lease: ms[0].Lease, Status: domain.AckDead}}}})
	require.NoError(t, err)
	require.True(t, res.Acks[0].Dead)
	require.Zero(t, pending(t, st, "in", "g"))
	res, err = st.Txn(ctx, domain.TxnParams{Push: []domain.PushParams{{Queue: domain.Global("side"), Messages: []domain.PushMessage{msg("s", "", "4")}}}})
	require.NoError(t, err)
	require.Empty(t, res.Acks)
	require.Equal(t, int64(1), res.Push[0][0].Offset)
}

// TestTxnIsAllOrNothing: one ack under an expired lease, in the middle of
// a transaction, refuses the whole of it: nothing is pushed and no other
// ack is applied, in any queue or group.
func TestTxnIsAllOrNothing(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "in", "a", 0, 2)
	pushN(t, st, "in", "b", 0, 2)
	pushN(t, st, "in2", "c", 0, 1)
	la, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("in"), Group: "g", Partition: "a", Max: 2})
	require.NoError(t, err)
	lb, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("in"), Group: "g", Partition: "b", Max: 2, LeaseMS: 100})
	require.NoError(t, err)
	lc, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("in2"), Group: "h"})
	require.NoError(t, err)
	require.Len(t, lc, 1)
	// b's lease expires: another pop of the group takes the partition.
	var again []domain.Message
	require.Eventually(t, func() bool {
		again, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("in"), Group: "g", Partition: "b", Max: 2})
		require.NoError(t, err)
		return len(again) > 0
	}, 10*time.Second, 20*time.Millisecond)

	params := domain.TxnParams{
		Acks: []domain.TxnAck{
			{Queue: domain.Global("in"), Group: "g", Ack: domain.Ack{Partition: "a", Offset: 1, Lease: la[0].Lease}},
			{Queue: domain.Global("in"), Group: "g", Ack: domain.Ack{Partition: "b", Offset: 1, Lease: lb[0].Lease}},
			{Queue: domain.Global("in2"), Group: "h", Ack: domain.Ack{Partition: "c", Offset: 0, Lease: lc[0].Lease}},
		},
		Push: []domain.PushParams{{Queue: domain.Global("out"), Messages: []domain.PushMessage{msg("p", "", "1")}}},
	}
	_, err = st.Txn(ctx, params)
	require.ErrorIs(t, err, domain.ErrConflict)
	require.EqualError(t, err, "acks[1]: lease expired or not held by this group")
	require.Zero(t, retained(t, st, "out"), "nothing pushed")
	require.Equal(t, int64(4), pending(t, st, "in", "g"), "a not acked")
	require.Equal(t, int64(1), pending(t, st, "in2", "h"), "c not acked")

	// An offset outside its lease, a lease of another partition and a
	// partition that does not exist refuse it the same way.
	for i, a := range []domain.Ack{
		{Partition: "a", Offset: 5, Lease: la[0].Lease},
		{Partition: "b", Offset: 0, Lease: la[0].Lease},
		{Partition: "zz", Offset: 0, Lease: la[0].Lease},
	} {
		p := params
		p.Acks = []domain.TxnAck{params.Acks[0], {Queue: domain.Global("in"), Group: "g", Ack: a}}
		_, err = st.Txn(ctx, p)
		require.ErrorIs(t, err, domain.ErrConflict, "case %d", i)
		require.ErrorContains(t, err, "acks[1]: ", "case %d", i)
	}
	require.Zero(t, retained(t, st, "out"))

	// With the live leases it commits, every part of it.
	params.Acks[1].Ack.Lease = again[0].Lease
	res, err := st.Txn(ctx, params)
	require.NoError(t, err)
	require.Len(t, res.Acks, 3)
	require.Equal(t, int64(1), retained(t, st, "out"))
	require.Zero(t, pending(t, st, "in", "g"))
	require.Zero(t, pending(t, st, "in2", "h"))
}

// TestTxnRefusedPushAcksNothing: a push over a queue limit refuses the
// transaction, and its acks stay unapplied.
func TestTxnRefusedPushAcksNothing(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	one, big := int64(1), int64(4)
	_, err := st.Configure(ctx, domain.Global("tiny"), domain.ConfigPatch{MaxMessages: &one})
	require.NoError(t, err)
	_, err = st.Configure(ctx, domain.Global("small"), domain.ConfigPatch{MaxMessageBytes: &big})
	require.NoError(t, err)
	pushN(t, st, "tiny", "p", 0, 1)
	pushN(t, st, "in", "p", 0, 1)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("in"), Group: "g"})
	require.NoError(t, err)
	ackIn := []domain.TxnAck{{Queue: domain.Global("in"), Group: "g", Ack: domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease}}}

	_, err = st.Txn(ctx, domain.TxnParams{Acks: ackIn, Push: []domain.PushParams{
		{Queue: domain.Global("out"), Messages: []domain.PushMessage{msg("p", "", "1")}},
		{Queue: domain.Global("tiny"), Messages: []domain.PushMessage{msg("p", "", "2")}},
	}})
	require.ErrorIs(t, err, domain.ErrLimit)
	require.ErrorContains(t, err, "push[1]: ")
	_, err = st.Txn(ctx, domain.TxnParams{Acks: ackIn, Push: []domain.PushParams{
		{Queue: domain.Global("small"), Messages: []domain.PushMessage{msg("p", "", "12345")}},
	}})
	require.ErrorIs(t, err, domain.ErrTooLarge)
	require.ErrorContains(t, err, "push[0]: ")
	require.Equal(t, int64(1), pending(t, st, "in", "g"), "not acked")
	require.Equal(t, int64(1), retained(t, st, "tiny"))
	require.Zero(t, retained(t, st, "out"))

	// An ack of a queue that does not exist is a 404, and creates none of
	// the queues pushed to.
	_, err = st.Txn(ctx, domain.TxnParams{
		Acks: []domain.TxnAck{{Queue: domain.Global("nope"), Group: "g", Ack: domain.Ack{Partition: "p", Lease: ms[0].Lease}}},
		Push: []domain.PushParams{{Queue: domain.Global("fresh"), Messages: []domain.PushMessage{msg("p", "", "1")}}},
	})
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.EqualError(t, err, `acks[0]: queue "nope": not found`)
	_, err = st.Info(ctx, domain.InfoParams{Queue: domain.Global("fresh"), Limit: 1000})
	require.ErrorIs(t, err, domain.ErrNotFound)

	res := ack(t, st, "in", "g", ackIn[0].Ack)
	require.True(t, res[0].OK, "the lease is still live and unused")
}

// TestTxnDeduplicates: producer ids deduplicate inside a transaction as in
// a push, against earlier transactions and within one, which is what makes
// a pipeline stage exactly-once.
func TestTxnDeduplicates(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	win := int64(600)
	_, err := st.Configure(ctx, domain.Global("out"), domain.ConfigPatch{DedupWindowS: &win})
	require.NoError(t, err)
	pushN(t, st, "in", "p", 0, 2)

	stage := func(ids ...string) [][]domain.PushResult {
		t.Helper()
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("in"), Group: "g", Max: 1})
		require.NoError(t, err)
		require.Len(t, ms, 1)
		var out []domain.PushMessage
		for _, id := range ids {
			out = append(out, msg("d", id, `"`+id+`"`))
		}
		res, err := st.Txn(ctx, domain.TxnParams{
			Acks: []domain.TxnAck{{Queue: domain.Global("in"), Group: "g", Ack: domain.Ack{Partition: ms[0].Partition, Offset: ms[0].Offset, Lease: ms[0].Lease}}},
			Push: []domain.PushParams{{Queue: domain.Global("out"), Messages: out}},
		})
		require.NoError(t, err)
		return res.Push
	}
	require.Equal(t, [][]domain.PushResult{{
		{Partition: "d", Offset: 0, Status: domain.Stored},
		{Partition: "d", Offset: 1, Status: domain.Stored},
		{Partition: "d", Offset: 0, Status: domain.Duplicate},
	}}, stage("x", "y", "x"))
	require.Equal(t, [][]domain.PushResult{{
		{Partition: "d", Offset: 1, Status: domain.Duplicate},
		{Partition: "d", Offset: 2, Status: domain.Stored},
	}}, stage("y", "z"))
	require.Equal(t, int64(3), retained(t, st, "out"))
	require.Zero(t, pending(t, st, "in", "g"))
}
