package comb_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

func TestGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Groups(b.ctx, "groups")
	require.ErrorIs(t, err, comb.ErrNotFound)
	_, err = c.Push(b.ctx, "groups", []comb.Message{{Data: []byte(`1`)}, {Data: []byte(`2`)}})
	require.NoError(t, err)
	_, err = c.Pop(b.ctx, "groups", comb.PopOptions{Group: "g", Max: 1})
	require.NoError(t, err)

	gs, err := c.Groups(b.ctx, "groups")
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Equal(t, "g", gs[0].Name)
	require.Equal(t, int64(2), gs[0].Pending)
	require.Equal(t, int64(1), gs[0].Leased)
	require.Positive(t, gs[0].OldestPendingAgeS)

	require.NoError(t, c.DeleteGroup(b.ctx, "groups", "g"))
	gs, err = c.Groups(b.ctx, "groups")
	require.NoError(t, err)
	require.Empty(t, gs)
	require.ErrorIs(t, c.DeleteGroup(b.ctx, "groups", "g"), comb.ErrNotFound)
	require.ErrorIs(t, c.DeleteGroup(b.ctx, "groups", ""), comb.ErrBadRequest)
	require.ErrorIs(t, c.DeleteGroup(b.ctx, "groups", "bad\x00name"), comb.ErrBadRequest)
}
