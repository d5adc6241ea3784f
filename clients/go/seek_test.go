package comb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

func TestSeek(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Push(b.ctx, "seek", []comb.Message{{Partition: "eu", Data: []byte(`1`)}, {Partition: "us", Data: []byte(`2`)}})
	require.NoError(t, err)
	mid := time.Now()
	_, err = c.Push(b.ctx, "seek", []comb.Message{{Partition: "eu", Data: []byte(`3`)}})
	require.NoError(t, err)

	// To the end: nothing left for the group, on both partitions.
	moved, err := c.Seek(b.ctx, "seek", comb.SeekOptions{Group: "g", To: comb.SeekEnd})
	require.NoError(t, err)
	require.Equal(t, 2, moved)
	d, err := c.Pop(b.ctx, "seek", comb.PopOptions{Group: "g", Partitions: 2})
	require.NoError(t, err)
	require.Empty(t, d)

	// Back to a time, on one partition: the message pushed after it.
	moved, err = c.Seek(b.ctx, "seek", comb.SeekOptions{Group: "g", Partition: "eu", To: comb.SeekTime(mid)})
	require.NoError(t, err)
	require.Equal(t, 1, moved)
	d, err = c.Pop(b.ctx, "seek", comb.PopOptions{Group: "g", Partitions: 2})
	require.NoError(t, err)
	require.Len(t, d, 1)
	require.Equal(t, "3", string(d[0].Data))

	// To the start, and a seek the service refuses.
	_, err = c.Seek(b.ctx, "seek", comb.SeekOptions{Group: "g", To: comb.SeekStart})
	require.NoError(t, err)
	d, err = c.Pop(b.ctx, "seek", comb.PopOptions{Group: "g", Partition: "eu", Max: 10})
	require.NoError(t, err)
	require.Len(t, d, 2)
	_, err = c.Seek(b.ctx, "seek", comb.SeekOptions{Group: "g", To: "yesterday"})
	require.ErrorIs(t, err, comb.ErrBadRequest)
	_, err = c.Seek(b.ctx, "nope", comb.SeekOptions{To: comb.SeekStart})
	require.ErrorIs(t, err, comb.ErrNotFound)
}
