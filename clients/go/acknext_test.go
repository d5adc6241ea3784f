package comb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
)

// AckAndPop settles a batch and gets the next in one request: the ack
// frees the partition, so the pop finds its next messages.
func TestAckAndPop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Push(b.ctx, "next", []comb.Message{{Partition: "p", Data: []byte(`1`)}, {Partition: "p", Data: []byte(`2`)}})
	require.NoError(t, err)
	opts := comb.PopOptions{Group: "g", Max: 1}
	first, err := c.Pop(b.ctx, "next", opts)
	require.NoError(t, err)
	require.Len(t, first, 1)

	got, res, err := c.AckAndPop(b.ctx, "next", []comb.Ack{
		{Partition: "p", Offset: first[0].Offset, Lease: first[0].Lease},
		{Partition: "p", Offset: 0, Lease: "l-1-0000000000000000"},
	}, opts)
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.True(t, res[0].OK)
	require.False(t, res[1].OK, "a wrong lease settles nothing and says so")
	require.Len(t, got, 1)
	require.Equal(t, first[0].Offset+1, got[0].Offset)
	require.Equal(t, "next", got[0].Queue)
	require.Equal(t, []byte(`2`), got[0].Data)

	// The last ack, with a long poll that ends empty.
	opts.Wait = 200 * time.Millisecond
	got, res, err = c.AckAndPop(b.ctx, "next", []comb.Ack{{Partition: "p", Offset: got[0].Offset, Lease: got[0].Lease}}, opts)
	require.NoError(t, err)
	require.Equal(t, []comb.AckResult{{OK: true}}, res)
	require.Empty(t, got)

	// Without acks it is a pop; a refused ack is an error and settles nothing.
	got, res, err = c.AckAndPop(b.ctx, "next", nil, comb.PopOptions{Group: "g"})
	require.NoError(t, err)
	require.Nil(t, res)
	require.Empty(t, got)
	_, _, err = c.AckAndPop(b.ctx, "next", []comb.Ack{{Offset: 0}}, opts)
	require.ErrorIs(t, err, comb.ErrBadRequest)
}

// DecodePopAckReply finds the acks' results at the end of the reply even
// when a message's data holds their text.
func TestDecodePopAckReply(t *testing.T) {
	t.Parallel()
	msgs := []domain.Message{{Partition: "p", Offset: 3, Lease: "l-1-00", Attempt: 1, CreatedAt: time.Unix(1, 0),
		Data: []byte(`{"x":1,"acks":[{"ok":false}]}`), Encoding: domain.EncodingJSON}}
	reply, _ := wire.PopReply(msgs, 0)
	reply = wire.AppendPopAcks(reply, wire.PopAcks([]domain.AckResult{{OK: true}, {Error: "lease expired"}}))
	got, res, err := comb.DecodePopAckReply(reply, "q", 2, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "q", got[0].Queue)
	require.JSONEq(t, `{"x":1,"acks":[{"ok":false}]}`, string(got[0].Data))
	require.Len(t, res, 2)
	require.True(t, res[0].OK)
	require.False(t, res[1].OK)
	require.Error(t, res[1].Err())

	_, _, err = comb.DecodePopAckReply(reply, "q", 3, nil)
	require.ErrorContains(t, err, "2 results for 3 acks")
	_, _, err = comb.DecodePopAckReply([]byte(`{"messages":[]}`), "q", 1, nil)
	require.ErrorContains(t, err, "no acks in the reply")
	_, _, err = comb.DecodePopAckReply(nil, "q", 1, nil)
	require.Error(t, err)
}
