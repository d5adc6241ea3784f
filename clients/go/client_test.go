package comb_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

func TestPushPopAckRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	c := b.client

	msgs := []comb.Message{
		{Partition: "eu", ID: "order-7", Data: []byte(`{"sku":42}`)},
		{Partition: "eu", Data: []byte(`{"sku": 43, "note": "<spaced>"}`)},
		{Data: []byte{0, 1, 2, 0xff}},
		{Partition: "eu", Data: []byte{}},
	}
	res, err := c.Push(ctx, "orders", msgs)
	require.NoError(t, err)
	require.Len(t, res, 4)
	for _, r := range res {
		require.Equal(t, comb.StatusStored, r.Status)
	}
	require.Equal(t, "eu", res[0].Partition)
	require.Equal(t, comb.DefaultPartition, res[2].Partition)
	require.Equal(t, res[0].Offset+1, res[1].Offset, "offsets in a partition are dense")

	// Dedup is off by default (dedup_window_s 0): the same id is stored again.
	again, err := c.Push(ctx, "orders", msgs[:1])
	require.NoError(t, err)
	require.Equal(t, comb.StatusStored, again[0].Status)
	require.Equal(t, res[3].Offset+1, again[0].Offset)

	got, err := c.Pop(ctx, "orders", comb.PopOptions{Group: "billing", Partition: "eu", Max: 10})
	require.NoError(t, err)
	require.Len(t, got, 4)
	for i, want := range []comb.Message{msgs[0], msgs[1], msgs[3], msgs[0]} {
		d := got[i]
		require.Equal(t, "eu", d.Partition)
		require.Equal(t, want.Data, d.Data, "message %d comes back byte for byte", i)
		require.Equal(t, want.ID, d.ID)
		require.Equal(t, 1, d.Attempt)
		require.NotEmpty(t, d.Lease)
		require.WithinDuration(t, time.Now(), d.CreatedAt, time.Minute)
		if i > 0 {
			require.Equal(t, got[i-1].Offset+1, d.Offset)
			require.Equal(t, got[0].Lease, d.Lease, "one lease per partition")
		}
	}

	// The lease is held: the group gets nothing more from "eu".
	more, err := c.Pop(ctx, "orders", comb.PopOptions{Group: "billing", Partition: "eu"})
	require.NoError(t, err)
	require.Empty(t, more)

	// Cumulative ack at the last offset settles the whole lease.
	last := got[len(got)-1]
	ar, err := c.Ack(ctx, "orders", "billing", []comb.Ack{{Partition: "eu", Offset: last.Offset, Lease: last.Lease}})
	require.NoError(t, err)
	require.Equal(t, []comb.AckResult{{OK: true}}, ar)

	// A second ack under the finished lease settles nothing and says so.
	ar, err = c.Ack(ctx, "orders", "billing", []comb.Ack{{Partition: "eu", Offset: last.Offset, Lease: last.Lease}})
	require.NoError(t, err)
	require.False(t, ar[0].OK)
	require.Error(t, ar[0].Err())

	// The binary message in the default partition, for another group.
	bin, err := c.Pop(ctx, "orders", comb.PopOptions{Partition: comb.DefaultPartition})
	require.NoError(t, err)
	require.Len(t, bin, 1)
	require.Equal(t, []byte{0, 1, 2, 0xff}, bin[0].Data)

	empty, err := c.Pop(ctx, "orders", comb.PopOptions{Group: "billing", Partition: "eu", Wait: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Empty(t, empty)
}

func TestPutHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client

	r, err := c.Put(b.ctx, "puts", []byte(`{"sku":42}`), comb.PutOptions{Partition: "eu", ID: "p-1"})
	require.NoError(t, err)
	require.Equal(t, comb.StatusStored, r.Status)
	require.Equal(t, "eu", r.Partition)

	r2, err := c.Put(b.ctx, "puts", []byte("raw bytes, not JSON"), comb.PutOptions{})
	require.NoError(t, err)
	require.Equal(t, comb.DefaultPartition, r2.Partition)

	got, err := c.Pop(b.ctx, "puts", comb.PopOptions{Partition: "eu", AutoAck: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "p-1", got[0].ID)
	require.Equal(t, `{"sku":42}`, string(got[0].Data))
	require.Empty(t, got[0].Lease, "auto-ack holds no lease")

	got, err = c.Pop(b.ctx, "puts", comb.PopOptions{Partition: comb.DefaultPartition, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "raw bytes, not JSON", string(got[0].Data))
}

func TestDedupWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Configure(b.ctx, "dedup", comb.ConfigPatch{DedupWindowS: comb.Int64(60)})
	require.NoError(t, err)
	first, err := c.Push(b.ctx, "dedup", []comb.Message{{Partition: "eu", ID: "order-7", Data: []byte(`1`)}})
	require.NoError(t, err)
	again, err := c.Push(b.ctx, "dedup", []comb.Message{{Partition: "eu", ID: "order-7", Data: []byte(`2`)}})
	require.NoError(t, err)
	require.Equal(t, comb.StatusDuplicate, again[0].Status)
	require.Equal(t, first[0].Offset, again[0].Offset)
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client

	t.Run("404 unknown queue", func(t *testing.T) {
		t.Parallel()
		_, err := c.Pop(b.ctx, "never-created", comb.PopOptions{})
		require.ErrorIs(t, err, comb.ErrNotFound)
		var e *comb.Error
		require.True(t, errors.As(err, &e))
		require.Equal(t, 404, e.Code)
		require.NotEmpty(t, e.Message)
		require.Contains(t, err.Error(), "pop never-created")

		_, err = c.Info(b.ctx, "never-created")
		require.ErrorIs(t, err, comb.ErrNotFound)
		require.ErrorIs(t, c.Delete(b.ctx, "never-created"), comb.ErrNotFound)
	})

	t.Run("400 bad ack status", func(t *testing.T) {
		t.Parallel()
		_, err := c.Push(b.ctx, "badack", []comb.Message{{Data: []byte(`1`)}})
		require.NoError(t, err)
		d, err := c.Pop(b.ctx, "badack", comb.PopOptions{})
		require.NoError(t, err)
		require.Len(t, d, 1)
		_, err = c.Ack(b.ctx, "badack", "", []comb.Ack{{Partition: d[0].Partition, Offset: d[0].Offset, Lease: d[0].Lease, Status: "finished"}})
		require.ErrorIs(t, err, comb.ErrBadRequest)
		var e *comb.Error
		require.True(t, errors.As(err, &e))
		require.Equal(t, 400, e.Code)
		require.NotEmpty(t, e.Message)
	})

	t.Run("400 bad queue name", func(t *testing.T) {
		t.Parallel()
		_, err := c.Push(b.ctx, "bad$name", []comb.Message{{Data: []byte(`1`)}})
		require.ErrorIs(t, err, comb.ErrBadRequest)
		_, err = c.Push(b.ctx, "", []comb.Message{{Data: []byte(`1`)}})
		require.ErrorIs(t, err, comb.ErrBadRequest)
	})

	t.Run("400 bad pop from", func(t *testing.T) {
		t.Parallel()
		_, err := c.Push(b.ctx, "badfrom", []comb.Message{{Data: []byte(`1`)}})
		require.NoError(t, err)
		_, err = c.Pop(b.ctx, "badfrom", comb.PopOptions{From: "yesterday"})
		require.ErrorIs(t, err, comb.ErrBadRequest)
	})

	t.Run("413 message too large", func(t *testing.T) {
		t.Parallel()
		_, err := c.Configure(b.ctx, "small", comb.ConfigPatch{MaxMessageBytes: comb.Int64(16)})
		require.NoError(t, err)
		_, err = c.Push(b.ctx, "small", []comb.Message{{Data: []byte(strings.Repeat("x", 17))}})
		require.ErrorIs(t, err, comb.ErrTooLarge)
	})

	t.Run("no responders", func(t *testing.T) {
		t.Parallel()
		other := comb.New(b.nc, comb.WithPrefix("nobody"))
		_, err := other.Pop(b.ctx, "q", comb.PopOptions{})
		require.ErrorIs(t, err, nats.ErrNoResponders)
		require.Contains(t, err.Error(), "nobody.pop.q")
	})

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		// A subscriber that never answers stands in for a stalled service.
		sub, err := b.nc.Subscribe("silent.pop.q", func(*nats.Msg) {})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		require.NoError(t, b.nc.Flush())
		silent := comb.New(b.nc, comb.WithPrefix("silent"), comb.WithTimeout(100*time.Millisecond))
		_, err = silent.Pop(b.ctx, "q", comb.PopOptions{})
		require.ErrorIs(t, err, nats.ErrTimeout)
	})
}

func TestConfigureInfoListDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client

	cfg, err := c.Configure(b.ctx, "cfg.a", comb.ConfigPatch{MaxAttempts: comb.Int64(5)})
	require.NoError(t, err)
	require.Equal(t, int64(5), cfg.MaxAttempts)
	require.Equal(t, int64(30000), cfg.LeaseMS, "defaults fill the rest")
	require.True(t, cfg.DeadLetter)

	// A partial patch merges: max_attempts stays 5.
	cfg, err = c.Configure(b.ctx, "cfg.a", comb.ConfigPatch{LeaseMS: comb.Int64(1000), DeadLetter: comb.Bool(false)})
	require.NoError(t, err)
	require.Equal(t, int64(5), cfg.MaxAttempts)
	require.Equal(t, int64(1000), cfg.LeaseMS)
	require.False(t, cfg.DeadLetter)

	_, err = c.Configure(b.ctx, "cfg.a", comb.ConfigPatch{MaxAttempts: comb.Int64(-1)})
	require.ErrorIs(t, err, comb.ErrBadRequest)

	// A queue created by a push gets the same defaults as one configured.
	_, err = c.Push(b.ctx, "cfg.b", []comb.Message{{Partition: "p1", Data: []byte(`1`)}, {Partition: "p2", Data: []byte(`2`)}})
	require.NoError(t, err)
	pushed, err := c.Configure(b.ctx, "cfg.b", comb.ConfigPatch{})
	require.NoError(t, err)
	fresh, err := c.Configure(b.ctx, "cfg.c", comb.ConfigPatch{})
	require.NoError(t, err)
	require.Equal(t, fresh, pushed)

	info, err := c.Info(b.ctx, "cfg.b")
	require.NoError(t, err)
	require.Equal(t, "cfg.b", info.Name)
	require.Equal(t, int64(2), info.Messages)
	require.Len(t, info.Partitions, 2)

	list, err := c.List(b.ctx)
	require.NoError(t, err)
	names := map[string]comb.QueueSummary{}
	for _, q := range list {
		names[q.Name] = q
	}
	require.Contains(t, names, "cfg.a")
	require.Contains(t, names, "cfg.c")
	require.Equal(t, int64(2), names["cfg.b"].Messages)

	require.NoError(t, c.Delete(b.ctx, "cfg.b"))
	_, err = c.Info(b.ctx, "cfg.b")
	require.ErrorIs(t, err, comb.ErrNotFound)
}

func TestRenew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Push(b.ctx, "renew", []comb.Message{{Data: []byte(`1`)}})
	require.NoError(t, err)
	d, err := c.Pop(b.ctx, "renew", comb.PopOptions{Lease: time.Second})
	require.NoError(t, err)
	require.Len(t, d, 1)
	res, err := c.Renew(b.ctx, "renew", []string{d[0].Lease, "l-unknown"}, time.Minute)
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.True(t, res[0].OK)
	require.Equal(t, d[0].Lease, res[0].Lease)
	require.WithinDuration(t, time.Now().Add(time.Minute), res[0].ExpiresAt, 10*time.Second)
	require.False(t, res[1].OK)
}

func TestDeadLettersReplayPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Configure(b.ctx, "dlq", comb.ConfigPatch{MaxAttempts: comb.Int64(1)})
	require.NoError(t, err)
	_, err = c.Push(b.ctx, "dlq", []comb.Message{
		{Partition: "eu", ID: "a", Data: []byte(`{"n":1}`)},
		{Partition: "eu", ID: "b", Data: []byte("\x00bin")},
	})
	require.NoError(t, err)

	// Fail each message once: with max_attempts 1 it is dead at once.
	for range 2 {
		d, err := c.Pop(b.ctx, "dlq", comb.PopOptions{Group: "g", Max: 1})
		require.NoError(t, err)
		require.Len(t, d, 1)
		ar, err := c.Ack(b.ctx, "dlq", "g", []comb.Ack{{Partition: d[0].Partition, Offset: d[0].Offset, Lease: d[0].Lease, Status: comb.AckFailed}})
		require.NoError(t, err)
		require.True(t, ar[0].OK, ar[0].Error)
	}
	dead, next, err := c.DeadLetters(b.ctx, "dlq", comb.DeadLetterQuery{Group: "g"})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, dead, 2)
	require.Equal(t, "a", dead[0].ID)
	require.Equal(t, `{"n":1}`, string(dead[0].Data))
	require.Equal(t, "\x00bin", string(dead[1].Data))
	require.Equal(t, "g", dead[0].Group)
	require.Equal(t, 1, dead[0].Attempts)

	// Pages of one.
	page, next, err := c.DeadLetters(b.ctx, "dlq", comb.DeadLetterQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.NotEmpty(t, next)
	page2, _, err := c.DeadLetters(b.ctx, "dlq", comb.DeadLetterQuery{Limit: 1, After: next})
	require.NoError(t, err)
	require.Len(t, page2, 1)
	require.Equal(t, dead[1].DLQID, page2[0].DLQID)

	n, err := c.Replay(b.ctx, "dlq", []string{dead[0].DLQID})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = c.Purge(b.ctx, "dlq", []string{dead[1].DLQID})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	left, _, err := c.DeadLetters(b.ctx, "dlq", comb.DeadLetterQuery{})
	require.NoError(t, err)
	require.Empty(t, left)

	// The replayed message is a new message the group receives again.
	d, err := c.Pop(b.ctx, "dlq", comb.PopOptions{Group: "g"})
	require.NoError(t, err)
	require.Len(t, d, 1)
	require.Equal(t, `{"n":1}`, string(d[0].Data))
	require.Equal(t, 1, d[0].Attempt)
}

func TestContextCancelIsNotATimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Push(b.ctx, "cancel", []comb.Message{{Data: []byte(`1`)}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.client.Pop(ctx, "cancel", comb.PopOptions{Group: "g", Partition: "empty", Wait: 10 * time.Second})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, nats.ErrTimeout)
	case <-time.After(5 * time.Second):
		t.Fatal("pop did not return after its context was cancelled")
	}
}

func TestExpiredLeaseRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	_, err := c.Push(b.ctx, "expire", []comb.Message{{Data: []byte(`1`)}, {Data: []byte(`2`)}})
	require.NoError(t, err)
	first, err := c.Pop(b.ctx, "expire", comb.PopOptions{Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, first, 2)

	// The lease runs out unsettled: a waiting pop gets both messages again.
	again, err := c.Pop(b.ctx, "expire", comb.PopOptions{Wait: 5 * time.Second})
	require.NoError(t, err)
	require.Len(t, again, 2)
	require.Equal(t, first[0].Offset, again[0].Offset)
	require.Equal(t, 2, again[0].Attempt)
	require.NotEqual(t, first[0].Lease, again[0].Lease)

	// The old lease settles nothing now.
	ar, err := c.Ack(b.ctx, "expire", "", []comb.Ack{{Partition: first[1].Partition, Offset: first[1].Offset, Lease: first[1].Lease}})
	require.NoError(t, err)
	require.False(t, ar[0].OK)
}
