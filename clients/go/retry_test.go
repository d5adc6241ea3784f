package comb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

// TestAckDelayAndError: Ack.Delay holds a failed message back, Ack.Error
// reaches the dead letter, and a Delay on a completed ack is refused.
func TestAckDelayAndError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	cfg, err := c.Configure(b.ctx, "rd", comb.ConfigPatch{MaxAttempts: comb.Int64(2), RetryDelayMS: comb.Int64(60000)})
	require.NoError(t, err)
	require.Equal(t, int64(60000), cfg.RetryDelayMS)
	require.Equal(t, int64(100), cfg.RetryBackoffPct)
	_, err = c.Push(b.ctx, "rd", []comb.Message{{Data: []byte(`1`)}})
	require.NoError(t, err)

	d, err := c.Pop(b.ctx, "rd", comb.PopOptions{})
	require.NoError(t, err)
	_, err = c.Ack(b.ctx, "rd", "", []comb.Ack{{Offset: 0, Lease: d[0].Lease, Delay: comb.Duration(time.Second)}})
	require.ErrorIs(t, err, comb.ErrBadRequest, "a delay with completed")
	began := time.Now()
	ar, err := c.Ack(b.ctx, "rd", "", []comb.Ack{{Offset: 0, Lease: d[0].Lease, Status: comb.AckFailed, Delay: comb.Duration(200 * time.Millisecond)}})
	require.NoError(t, err)
	require.NoError(t, ar[0].Err())
	d, err = c.Pop(b.ctx, "rd", comb.PopOptions{Wait: 5 * time.Second})
	require.NoError(t, err)
	require.Len(t, d, 1, "the ack's 200 ms, not the queue's minute")
	require.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond)
	require.Equal(t, 2, d[0].Attempt)

	ar, err = c.Ack(b.ctx, "rd", "", []comb.Ack{{Offset: 0, Lease: d[0].Lease, Status: comb.AckFailed, Error: "card declined"}})
	require.NoError(t, err)
	require.NoError(t, ar[0].Err())
	dead, _, err := c.DeadLetters(b.ctx, "rd", comb.DeadLetterQuery{})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "card declined", dead[0].Error)
	require.Equal(t, comb.AckFailed, dead[0].Reason)
}
