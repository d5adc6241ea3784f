package comb_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

func TestPeek(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Configure(b.ctx, "peek", comb.ConfigPatch{DedupWindowS: comb.Int64(60)})
	require.NoError(t, err)
	var want []comb.Message
	for i := range 5 {
		want = append(want, comb.Message{Partition: "eu", ID: fmt.Sprint("order-", i), Data: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	want = append(want, comb.Message{Partition: "eu", ID: "bin", Data: []byte{0x00, 0xff, 0xfe, 'x'}})
	_, err = c.Push(b.ctx, "peek", want)
	require.NoError(t, err)

	// Everything push stored, binary data included, leasing nothing.
	page, err := c.Peek(b.ctx, "peek", comb.PeekQuery{Partition: "eu"})
	require.NoError(t, err)
	require.Len(t, page.Messages, 6)
	require.Equal(t, int64(-1), page.Next)
	for i, m := range page.Messages {
		require.Equal(t, int64(i), m.Offset)
		require.Equal(t, want[i].ID, m.ID)
		require.Equal(t, want[i].Data, m.Data)
		require.Empty(t, m.Lease)
		require.Zero(t, m.Attempt)
		require.False(t, m.CreatedAt.IsZero())
	}

	// A pop after the peeks gets the same messages, at attempt 1.
	d, err := c.Pop(b.ctx, "peek", comb.PopOptions{Partition: "eu", Max: 10})
	require.NoError(t, err)
	require.Len(t, d, 6)
	for i := range d {
		require.Equal(t, 1, d[i].Attempt)
		require.Equal(t, want[i].Data, d[i].Data)
	}

	// Paging with next, while the pop's lease is held: peek does not care.
	var got []int64
	q := comb.PeekQuery{Partition: "eu", Limit: 4}
	for range 10 {
		page, err := c.Peek(b.ctx, "peek", q)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Messages), 4)
		for _, m := range page.Messages {
			got = append(got, m.Offset)
		}
		if page.Next < 0 {
			break
		}
		q.From = page.Next
	}
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5}, got)
	page, err = c.Peek(b.ctx, "peek", comb.PeekQuery{Partition: "eu", From: 2, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Messages, 2)
	require.Equal(t, int64(4), page.Next)

	// By producer id.
	page, err = c.Peek(b.ctx, "peek", comb.PeekQuery{Partition: "eu", ID: "bin"})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	require.Equal(t, int64(5), page.Messages[0].Offset)
	require.Equal(t, want[5].Data, page.Messages[0].Data)
	_, err = c.Peek(b.ctx, "peek", comb.PeekQuery{Partition: "eu", ID: "nope"})
	require.ErrorIs(t, err, comb.ErrNotFound)
	_, err = c.Peek(b.ctx, "peek", comb.PeekQuery{Partition: "us", ID: "order-1"})
	require.ErrorIs(t, err, comb.ErrNotFound, "ids are per partition")

	// A queue that remembers no ids says so.
	_, err = c.Push(b.ctx, "nodedup", []comb.Message{{ID: "x", Data: []byte(`1`)}})
	require.NoError(t, err)
	_, err = c.Peek(b.ctx, "nodedup", comb.PeekQuery{ID: "x"})
	require.ErrorIs(t, err, comb.ErrNotFound)
	require.ErrorContains(t, err, "dedup_window_s is 0: ids are not remembered")

	// Bad input, each a 400 naming the field; a missing queue is a 404.
	for q, field := range map[*comb.PeekQuery]string{
		{From: -1}:              "from:",
		{Limit: 1001}:           "limit:",
		{Limit: -1}:             "limit:",
		{Partition: "a\u0000b"}: "partition:",
		{ID: "a\u0001"}:         "id:",
	} {
		_, err := c.Peek(b.ctx, "peek", *q)
		require.ErrorIs(t, err, comb.ErrBadRequest, field)
		require.ErrorContains(t, err, field)
	}
	_, err = c.Peek(b.ctx, "missing", comb.PeekQuery{})
	require.ErrorIs(t, err, comb.ErrNotFound)

	// Still nothing changed: the lease is the pop's, and the group has
	// its six messages leased, none settled.
	info, err := c.Info(b.ctx, "peek")
	require.NoError(t, err)
	require.Equal(t, int64(6), info.Messages)
}
