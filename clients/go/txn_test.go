package comb_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

// TestTxn: a stage acks its input and pushes its output in one call; a
// stale lease refuses the whole of it with ErrConflict.
func TestTxn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, c := b.ctx, b.client
	_, err := c.Push(ctx, "stage-in", []comb.Message{{Partition: "eu", ID: "job-1", Data: []byte(`{"n":1}`)}})
	require.NoError(t, err)
	got, err := c.Pop(ctx, "stage-in", comb.PopOptions{Group: "stage"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	d := got[0]

	acks := []comb.TxnAck{{Queue: "stage-in", Group: "stage", Ack: comb.Ack{Partition: d.Partition, Offset: d.Offset, Lease: d.Lease}}}
	pushes := []comb.TxnPush{{Queue: "stage-out", Messages: []comb.Message{{ID: d.ID, Data: []byte{0, 1}}, {Partition: "x", Data: []byte(`"y"`)}}}}
	res, err := c.Txn(ctx, acks, pushes)
	require.NoError(t, err)
	require.Equal(t, []comb.AckResult{{OK: true}}, res.Acks)
	require.Equal(t, [][]comb.PushResult{{
		{Partition: comb.DefaultPartition, Offset: 0, Status: comb.StatusStored},
		{Partition: "x", Offset: 0, Status: comb.StatusStored},
	}}, res.Push)

	_, err = c.Txn(ctx, acks, pushes)
	require.ErrorIs(t, err, comb.ErrConflict)
	require.ErrorContains(t, err, "acks[0]: lease expired")
	info, err := c.Info(ctx, "stage-out")
	require.NoError(t, err)
	require.Equal(t, int64(2), info.Messages, "the refused transaction pushed nothing")
	out, err := c.Pop(ctx, "stage-out", comb.PopOptions{Max: 10})
	require.NoError(t, err)
	require.Equal(t, []byte{0, 1}, out[0].Data)
	require.Equal(t, "job-1", out[0].ID)

	_, err = c.Txn(ctx, []comb.TxnAck{{Queue: "no such", Ack: comb.Ack{Lease: "l"}}}, nil)
	require.ErrorIs(t, err, comb.ErrBadRequest)
	res, err = c.Txn(ctx, nil, nil)
	require.NoError(t, err)
	require.Empty(t, res.Acks)
}
