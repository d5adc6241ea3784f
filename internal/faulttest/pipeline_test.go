//go:build linux

package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/pgtest"
)

// TestPipelineExactlyOnceAcrossBrokerKills runs a two-stage pipeline — a
// queue of inputs, a stage that pops them and, per batch, acks the inputs
// and pushes one output each (producer id = the input's id) in one
// transaction, and the output queue — while the `comb serve` process is
// SIGKILLed and started again three times. A transaction that got no
// answer is sent again as it was: it either committed (its lease is then
// ended, and the retry is a 409) or did not (and commits now, or its lease
// expires and its inputs come back to the stage). Afterwards every input
// is in the output exactly once, with its data, and nothing else is; no
// offset of the output was spent on a second copy, and no output was ever
// answered as a duplicate: the acks and the pushes went together, so no
// input was processed twice past a commit.
//
// It does not run in parallel, like the other broker kills of this package.
func TestPipelineExactlyOnceAcrossBrokerKills(t *testing.T) {
	const (
		inputs     = 2000
		partitions = 4
		workers    = 3
		batch      = 20
		kills      = 3
		leaseMS    = 5000 // outlives a restart: a transaction sent again then mostly commits
		in, out    = "pipe-in", "pipe-out"
		group      = "stage"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	b := newBrokerProc(t, pgtest.URL(t))
	b.start()
	nc := connectForever(t, b.url)
	c := comb.New(nc, comb.WithTimeout(2*time.Second))
	_, err := c.Configure(ctx, in, comb.ConfigPatch{LeaseMS: comb.Int64(leaseMS)})
	require.NoError(t, err)
	_, err = c.Configure(ctx, out, comb.ConfigPatch{DedupWindowS: comb.Int64(600)})
	require.NoError(t, err)

	id := func(i int) string { return "in-" + strconv.Itoa(i) }
	var unanswered atomic.Int64
	for from := 0; from < inputs; from += 500 {
		msgs := make([]comb.Message, 0, 500)
		for i := from; i < from+500; i++ {
			msgs = append(msgs, comb.Message{Partition: "p" + strconv.Itoa(i%partitions), ID: id(i), Data: []byte(strconv.Quote(id(i)))})
		}
		_, err := pushRetrying(ctx, c, in, msgs, &unanswered)
		require.NoError(t, err)
	}

	var (
		committed  atomic.Int64 // inputs whose transaction was answered OK
		retried    atomic.Int64 // transactions sent again after no answer
		refused    atomic.Int64 // transactions answered 409 (committed before, or lease gone)
		duplicates atomic.Int64 // outputs answered "duplicate"
	)
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for sctx.Err() == nil {
				ds, err := c.Pop(sctx, in, comb.PopOptions{Group: group, Max: batch, Wait: 200 * time.Millisecond})
				if err != nil {
					if sctx.Err() == nil && !brokerAway(err) {
						t.Errorf("pop: %v", err)
						return
					}
					continue // the broker is down: its reply is lost, the lease expires
				}
				if len(ds) == 0 {
					continue
				}
				outs := make([]comb.Message, len(ds))
				for i, d := range ds {
					outs[i] = comb.Message{Partition: d.Partition, ID: d.ID, Data: []byte(strconv.Quote("out:" + string(d.Data)))}
				}
				last := ds[len(ds)-1]
				acks := []comb.TxnAck{{Queue: in, Group: group, Ack: comb.Ack{Partition: last.Partition, Offset: last.Offset, Lease: last.Lease}}}
				res, err := txnRetrying(sctx, c, acks, []comb.TxnPush{{Queue: out, Messages: outs}}, &retried)
				switch {
				case errors.Is(err, comb.ErrConflict):
					refused.Add(1)
				case err != nil:
					if sctx.Err() == nil {
						t.Errorf("txn: %v", err)
					}
					return
				default:
					committed.Add(int64(len(ds)))
					for _, r := range res.Push[0] {
						if r.Status == comb.StatusDuplicate {
							duplicates.Add(1)
						}
					}
				}
			}
		})
	}
	defer func() { stop(); wg.Wait() }()

	for k := 1; k <= kills; k++ {
		waitFor(t, 30*time.Second, fmt.Sprintf("kill %d: %d inputs through", k, k*inputs/(kills+1)), func() bool {
			return committed.Load() >= int64(k*inputs/(kills+1)) || t.Failed()
		})
		require.False(t, t.Failed(), "a stage worker failed")
		b.kill()
		b.start()
	}
	// Done once the stage has completed every input.
	waitCompleted(ctx, t, 45*time.Second, c, in, group, func() bool { return !t.Failed() })
	stop()
	wg.Wait()
	require.False(t, t.Failed(), "a stage worker failed")

	// Read the output back whole, with a group of its own.
	seen := map[string]int{}
	var others []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		require.True(t, time.Now().Before(deadline), "reading the output back")
		ds, err := c.Pop(ctx, out, comb.PopOptions{Group: "verify", Max: 1000, Partitions: partitions, AutoAck: true})
		if err != nil && brokerAway(err) {
			continue
		}
		require.NoError(t, err)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			seen[d.ID]++
			if want := strconv.Quote("out:" + strconv.Quote(d.ID)); string(d.Data) != want {
				others = append(others, fmt.Sprintf("%s/%d: id %q data %s", d.Partition, d.Offset, d.ID, d.Data))
			}
		}
	}
	for i := range inputs {
		require.Equal(t, 1, seen[id(i)], "input %s in the output", id(i))
		delete(seen, id(i))
	}
	require.Empty(t, seen, "the output holds only the inputs' outputs")
	require.Empty(t, others, "every output carries its input's data")
	info, err := c.Info(ctx, out)
	require.NoError(t, err)
	var span int64
	for _, p := range info.Partitions {
		span += p.NextOffset - p.LowOffset
	}
	require.EqualValues(t, inputs, span, "no offset of the output was spent on a second copy")
	require.Zero(t, duplicates.Load(), "no input was processed again after its transaction committed")
	// Inputs not committed by an answered transaction were committed by
	// one whose answer was lost: its retry was the 409.
	t.Logf("%d inputs, %d kills: %d inputs committed by answered transactions, %d by transactions whose answer was lost; "+
		"%d transactions sent again after no answer, %d refused with 409, %d outputs answered as duplicates",
		inputs, kills, committed.Load(), inputs-committed.Load(), retried.Load(), refused.Load(), duplicates.Load())
	require.Positive(t, retried.Load()+refused.Load(), "the kills were noticed by the stage")
}

// brokerAway reports whether err is what a request gets while the broker
// is down or restarting: its outcome is unknown.
func brokerAway(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, comb.ErrUnavailable)
}

// txnRetrying sends a transaction until the broker answers, sending the
// same one again after an answer that did not come.
func txnRetrying(ctx context.Context, c *comb.Client, acks []comb.TxnAck, pushes []comb.TxnPush, retries *atomic.Int64) (comb.TxnResult, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 20 * time.Millisecond
	bo.MaxInterval = 200 * time.Millisecond
	bo.MaxElapsedTime = 30 * time.Second
	return backoff.RetryWithData(func() (comb.TxnResult, error) {
		res, err := c.Txn(ctx, acks, pushes)
		if err == nil {
			return res, nil
		}
		if brokerAway(err) {
			retries.Add(1)
			return comb.TxnResult{}, err
		}
		return comb.TxnResult{}, backoff.Permanent(err)
	}, backoff.WithContext(bo, ctx))
}
