package comb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/protocol"
)

// payload is the body of the messages the consume tests push.
type payload struct {
	P string `json:"p"`
	I int    `json:"i"`
}

// pushNumbered pushes perPartition messages into each of partitions,
// numbered from 0 within their partition.
func pushNumbered(t *testing.T, b *bundle, queue string, partitions []string, perPartition int) {
	t.Helper()
	var msgs []comb.Message
	for i := range perPartition {
		for _, p := range partitions {
			data, err := json.Marshal(payload{P: p, I: i})
			require.NoError(t, err)
			msgs = append(msgs, comb.Message{Partition: p, Data: data})
		}
	}
	res, err := b.client.Push(b.ctx, queue, msgs)
	require.NoError(t, err)
	require.Len(t, res, len(msgs))
}

// runConsume starts Consume and returns a stop function that cancels it and
// returns its result.
func runConsume(t *testing.T, b *bundle, c *comb.Client, queue string, opts comb.ConsumeOptions, h comb.Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, queue, opts, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				err = fmt.Errorf("consume did not return 15 s after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFor waits until ch is closed, failing the test after d.
func waitFor(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

func TestConsumeEveryMessageOnceInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parts := []string{"p0", "p1", "p2", "p3", "p4"}
	const per = 40
	const total = per * 5
	pushNumbered(t, b, "consume", parts, per)

	var (
		mu      sync.Mutex
		seen    = map[string][]int{} // partition -> payload numbers in handling order
		offsets = map[string][]int64{}
		count   int
		all     = make(chan struct{})
	)
	stats := &comb.ConsumeStats{}
	stop := runConsume(t, b, b.client, "consume", comb.ConsumeOptions{
		Group:       "billing",
		Max:         7,
		Partitions:  2,
		Concurrency: 3,
		Wait:        200 * time.Millisecond,
		Stats:       stats,
		OnAckError:  func(err error) { t.Errorf("ack error: %v", err) },
	}, func(ctx context.Context, batch []comb.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range batch {
			var p payload
			if err := json.Unmarshal(d.Data, &p); err != nil || p.P != d.Partition {
				t.Errorf("message %s/%d: %q in the wrong partition or not ours (%v)", d.Partition, d.Offset, d.Data, err)
			}
			seen[d.Partition] = append(seen[d.Partition], p.I)
			offsets[d.Partition] = append(offsets[d.Partition], d.Offset)
			count++
		}
		if count == total {
			close(all)
		}
		return nil
	})

	waitFor(t, all, 20*time.Second, "every message")
	require.NoError(t, stop())

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, total, count, "each message handled exactly once")
	for _, p := range parts {
		require.Len(t, seen[p], per, p)
		for i, n := range seen[p] {
			require.Equal(t, i, n, "partition %s delivered in order", p)
			if i > 0 {
				require.Equal(t, offsets[p][i-1]+1, offsets[p][i], "partition %s offsets dense", p)
			}
		}
	}
	// Consume returned after its acks: every message is settled.
	require.Equal(t, int64(total), stats.Popped.Load())
	require.Equal(t, int64(total), stats.Acked.Load())
	require.Zero(t, stats.AckErrors.Load())
	info, err := b.client.Info(b.ctx, "consume")
	require.NoError(t, err)
	require.Len(t, info.Groups, 1)
	require.Equal(t, "billing", info.Groups[0].Name)
	require.Zero(t, info.Groups[0].Pending)
	require.Zero(t, info.Groups[0].Leased)
}

func TestConsumeHandlerErrorRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushNumbered(t, b, "redeliver", []string{"eu"}, 3)

	type call struct {
		offsets  []int64
		attempts []int
	}
	calls := make(chan call, 10)
	var n atomic.Int32
	stats := &comb.ConsumeStats{}
	stop := runConsume(t, b, b.client, "redeliver", comb.ConsumeOptions{
		Wait:  100 * time.Millisecond,
		Stats: stats,
	}, func(ctx context.Context, batch []comb.Delivery) error {
		var c call
		for _, d := range batch {
			c.offsets = append(c.offsets, d.Offset)
			c.attempts = append(c.attempts, d.Attempt)
		}
		calls <- c
		if n.Add(1) == 1 {
			return fmt.Errorf("transient trouble")
		}
		return nil
	})

	var first, second call
	select {
	case first = <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no first delivery")
	}
	select {
	case second = <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no redelivery after a handler error")
	}
	require.NoError(t, stop())

	require.Len(t, first.offsets, 3)
	require.Equal(t, first.offsets, second.offsets, "the whole batch comes back")
	for i := range first.attempts {
		require.Equal(t, 1, first.attempts[i])
		require.Equal(t, 2, second.attempts[i], "a failed ack spends an attempt")
	}
	require.Equal(t, int64(1), stats.HandlerErrors.Load())
	require.Equal(t, int64(3), stats.Nacked.Load())
	require.Equal(t, int64(3), stats.Acked.Load())
	require.Len(t, calls, 0, "nothing delivered after the successful retry")
}

func TestConsumeDeadLettersAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Configure(b.ctx, "poison", comb.ConfigPatch{MaxAttempts: comb.Int64(2)})
	require.NoError(t, err)
	_, err = b.client.Push(b.ctx, "poison", []comb.Message{{ID: "bad", Data: []byte(`"poison"`)}})
	require.NoError(t, err)

	var calls atomic.Int32
	stop := runConsume(t, b, b.client, "poison", comb.ConsumeOptions{Wait: 100 * time.Millisecond},
		func(ctx context.Context, batch []comb.Delivery) error {
			calls.Add(1)
			return fmt.Errorf("cannot handle %s", batch[0].Data)
		})

	var dead []comb.DeadLetter
	require.Eventually(t, func() bool {
		dead, _, err = b.client.DeadLetters(b.ctx, "poison", comb.DeadLetterQuery{})
		return err == nil && len(dead) > 0
	}, 10*time.Second, 20*time.Millisecond, "the message is dead-lettered")
	require.NoError(t, stop())
	require.Len(t, dead, 1)
	require.Equal(t, "bad", dead[0].ID)
	require.Equal(t, 2, dead[0].Attempts)
	require.Equal(t, int32(2), calls.Load())
}

// TestConsumeAckInflightBound puts a relay between the client and the
// service that delays every ack, and counts the acks it holds: that count
// must never exceed AckInflight, and no ack may be dropped.
func TestConsumeAckInflightBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parts := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const per = 15
	const total = per * 8
	pushNumbered(t, b, "bound", parts, per)

	const limit = 2
	var cur, peak atomic.Int64
	startRelay(t, b.nc, "slow", comb.DefaultPrefix, func(verb string) func() {
		if verb != protocol.VerbAck {
			return func() {}
		}
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(15 * time.Millisecond) // the relay's injected latency, not a wait
		return func() { cur.Add(-1) }
	})

	var handled atomic.Int64
	all := make(chan struct{})
	stats := &comb.ConsumeStats{}
	slow := comb.New(b.nc, comb.WithPrefix("slow"))
	stop := runConsume(t, b, slow, "bound", comb.ConsumeOptions{
		Max:         3,
		Partitions:  2,
		Concurrency: 4,
		AckInflight: limit,
		Wait:        100 * time.Millisecond,
		Stats:       stats,
		OnAckError:  func(err error) { t.Errorf("ack error: %v", err) },
	}, func(ctx context.Context, batch []comb.Delivery) error {
		if handled.Add(int64(len(batch))) == total {
			close(all)
		}
		return nil
	})
	waitFor(t, all, 30*time.Second, "every message")
	require.NoError(t, stop())

	require.LessOrEqual(t, peak.Load(), int64(limit), "acks in flight never exceed AckInflight")
	require.Equal(t, int64(total), stats.Acked.Load(), "no ack dropped")
	info, err := b.client.Info(b.ctx, "bound")
	require.NoError(t, err)
	require.Zero(t, info.Groups[0].Pending)
	t.Logf("peak acks in flight %d of %d", peak.Load(), limit)
}

func TestConsumeBadRequestIsFatal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Push(b.ctx, "fatal", []comb.Message{{Data: []byte(`1`)}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	err = b.client.Consume(ctx, "fatal", comb.ConsumeOptions{Group: "bad\x01group"},
		func(context.Context, []comb.Delivery) error { return nil })
	require.ErrorIs(t, err, comb.ErrBadRequest)
	require.NoError(t, ctx.Err(), "returned at once, not at the deadline")
}

func TestConsumeRetriesMissingQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	popErrs := make(chan error, 100)
	got := make(chan struct{})
	var once sync.Once
	stop := runConsume(t, b, b.client, "later", comb.ConsumeOptions{
		Wait:       50 * time.Millisecond,
		OnPopError: func(err error) { popErrs <- err },
	}, func(ctx context.Context, batch []comb.Delivery) error {
		once.Do(func() { close(got) })
		return nil
	})
	select {
	case err := <-popErrs:
		require.ErrorIs(t, err, comb.ErrNotFound)
	case <-time.After(10 * time.Second):
		t.Fatal("no pop error for a missing queue")
	}
	_, err := b.client.Push(b.ctx, "later", []comb.Message{{Data: []byte(`1`)}})
	require.NoError(t, err)
	waitFor(t, got, 10*time.Second, "the message pushed after the queue appeared")
	require.NoError(t, stop())
}

// startRelay serves every request on <from>.> by sending it on to <to>.>
// and relaying the reply, headers included. hook runs before forwarding
// with the request's verb and returns a function run once the service has
// answered, just before the reply goes back.
func startRelay(t *testing.T, nc *nats.Conn, from, to string, hook func(verb string) func()) {
	t.Helper()
	var wg sync.WaitGroup
	sub, err := nc.Subscribe(from+".>", func(m *nats.Msg) {
		wg.Go(func() {
			rest := strings.TrimPrefix(m.Subject, from+".")
			verb, _, _ := strings.Cut(rest, ".")
			done := hook(verb)
			fwd := nats.NewMsg(to + "." + rest)
			fwd.Header = m.Header
			fwd.Data = m.Data
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rep, err := nc.RequestMsgWithContext(ctx, fwd)
			// Before the reply: once it is out, the client may send its
			// next request, and the count must already be down.
			done()
			if err != nil {
				return // the client times out as it would against a dead service
			}
			out := nats.NewMsg(m.Reply)
			out.Header = rep.Header
			out.Data = rep.Data
			_ = nc.PublishMsg(out)
		})
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() {
		_ = sub.Unsubscribe()
		wg.Wait()
	})
}

// TestConsumeDrainsAcksOnCancel cancels Consume while its ack is slowed by a
// relay: Consume returns only once the ack has landed, or with
// ErrDrainTimeout when that takes longer than DrainTimeout.
func TestConsumeDrainsAcksOnCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushNumbered(t, b, "drain", []string{"a"}, 3)
	pushNumbered(t, b, "drain2", []string{"a"}, 3)
	ackDelay := map[string]time.Duration{"drain": 300 * time.Millisecond, "drain2": 1500 * time.Millisecond}
	for _, queue := range []string{"drain", "drain2"} {
		startRelay(t, b.nc, "slow-"+queue, comb.DefaultPrefix, func(verb string) func() {
			if verb == protocol.VerbAck {
				time.Sleep(ackDelay[queue]) // injected latency
			}
			return func() {}
		})
	}

	run := func(queue string, drain time.Duration) (*comb.ConsumeStats, time.Duration, error) {
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		stats := &comb.ConsumeStats{}
		c := comb.New(b.nc, comb.WithPrefix("slow-"+queue))
		start := time.Now()
		err := c.Consume(ctx, queue, comb.ConsumeOptions{Wait: 100 * time.Millisecond, DrainTimeout: drain, Stats: stats},
			func(ctx context.Context, batch []comb.Delivery) error {
				cancel() // stop right after this batch
				return nil
			})
		return stats, time.Since(start), err
	}

	stats, _, err := run("drain", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(3), stats.Acked.Load(), "the ack in flight at cancel landed before Consume returned")

	stats, took, err := run("drain2", 200*time.Millisecond)
	require.ErrorIs(t, err, comb.ErrDrainTimeout)
	require.Zero(t, stats.Acked.Load())
	require.Less(t, took, time.Second, "the wait for acks is bounded")
}

// A handler slower than the lease keeps its batch: Consume renews the
// leases while it runs, so another consumer of the group gets nothing
// meanwhile and the batch's ack is accepted. With renewal off, the same
// handler loses its batch to the other consumer when the lease expires.
func TestConsumeRenewsLeasesOfASlowHandler(t *testing.T) {
	t.Parallel()
	for _, renew := range []bool{true, false} {
		t.Run(fmt.Sprint("renew=", renew), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			queue := fmt.Sprint("slowhandler-", renew)
			_, err := b.client.Configure(b.ctx, queue, comb.ConfigPatch{LeaseMS: comb.Int64(600)})
			require.NoError(t, err)
			pushNumbered(t, b, queue, []string{"eu"}, 3)

			every := 150 * time.Millisecond
			if !renew {
				every = -1
			}
			stats := &comb.ConsumeStats{}
			handling := make(chan struct{})
			release := make(chan struct{})
			var calls atomic.Int32
			stop := runConsume(t, b, b.client, queue, comb.ConsumeOptions{
				Wait: 100 * time.Millisecond, RenewEvery: every, Stats: stats,
			}, func(ctx context.Context, batch []comb.Delivery) error {
				if calls.Add(1) == 1 {
					close(handling)
					<-release // slower than the lease, several times over
				}
				return nil
			})
			waitFor(t, handling, 10*time.Second, "the handler")
			// Past the lease twice over: another consumer of the group pops.
			time.Sleep(1500 * time.Millisecond)
			other, err := b.client.Pop(b.ctx, queue, comb.PopOptions{Max: 10})
			require.NoError(t, err)
			close(release)
			require.NoError(t, stop())

			if renew {
				require.Empty(t, other, "the renewed lease still holds the batch")
				require.Positive(t, stats.Renewed.Load())
				require.Zero(t, stats.RenewErrors.Load())
				require.Zero(t, stats.AckErrors.Load())
				require.Equal(t, int64(3), stats.Acked.Load())
			} else {
				require.Len(t, other, 3, "without renewal the lease expired")
				require.Zero(t, stats.Renewed.Load())
				require.Equal(t, int64(1), stats.AckErrors.Load(), "the late ack is refused")
			}
		})
	}
}
