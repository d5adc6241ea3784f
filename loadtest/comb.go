package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/protocol"
)

// combBackend loads a running Comb through the Go client, over NATS TCP.
type combBackend struct {
	cfg     *Config
	conns   []*nats.Conn
	clients []*comb.Client // ClientGo
	raws    []*rawClient   // ClientRaw
	parts   []string       // partition names
	pid     int
}

// Backoff bounds of a consumer whose pops fail.
const (
	popBackoffMin = 50 * time.Millisecond
	popBackoffMax = 2 * time.Second
)

func newCombBackend(ctx context.Context, cfg *Config, log *slog.Logger) (*combBackend, error) {
	b := &combBackend{cfg: cfg, parts: partitionNames(cfg.Partitions)}
	// A broker that is still starting (docker compose starts the loader
	// next to it) is waited for, until ctx ends.
	for i := range cfg.Conns {
		var nc *nats.Conn
		err := retry(ctx, func(context.Context) (err error) {
			nc, err = nats.Connect(cfg.NATSURL, append(cfg.natsOptions(),
				nats.Name("comb-loadtest-"+strconv.Itoa(i)),
				nats.MaxReconnects(-1),
				nats.ReconnectWait(250*time.Millisecond),
			)...)
			return err
		})
		if err != nil {
			b.close()
			return nil, fmt.Errorf("connect to %s: %w", cfg.RedactedURL(), err)
		}
		b.conns = append(b.conns, nc)
		b.clients = append(b.clients, comb.New(nc))
		raw := newRawClient(nc, cfg.Queue)
		raw.headers = loadHeaderJSON(cfg.Headers)
		b.raws = append(b.raws, raw)
	}
	// The window is set even when off, so that a run without ids after a
	// run with them says what the queue is configured with.
	patch := comb.ConfigPatch{
		CompletedRetentionS: comb.Int64(int64(cfg.CompletedRetention / time.Second)),
		DedupWindowS:        comb.Int64(int64(cfg.DedupWindow / time.Second)),
	}
	err := retry(ctx, func(actx context.Context) error {
		_, err := b.clients[0].Configure(actx, cfg.Queue, patch)
		if errors.Is(err, protocol.ErrBadRequest) {
			return backoff.Permanent(err)
		}
		return err
	})
	if err != nil {
		b.close()
		return nil, fmt.Errorf("configure queue %s: %w", cfg.Queue, err)
	}
	if cfg.Pipeline {
		out := PipelineQueue(cfg.Queue)
		err := retry(ctx, func(actx context.Context) error {
			_, err := b.clients[0].Configure(actx, out, comb.ConfigPatch{MaxAgeS: comb.Int64(PipelineMaxAgeS)})
			if errors.Is(err, protocol.ErrBadRequest) {
				return backoff.Permanent(err)
			}
			return err
		})
		if err != nil {
			b.close()
			return nil, fmt.Errorf("configure queue %s: %w", out, err)
		}
	}
	b.pid = listenerPID(cfg.NATSURL)
	if b.pid == 0 && cfg.BrokerPID == 0 {
		log.Info("loadtest: broker process not found on this host; its memory and CPU columns stay empty (set -broker-pid)")
	}
	return b, nil
}

// retry calls f until it succeeds, returns a backoff.Permanent error, or
// ctx or half a minute ends, and returns f's last error. Each attempt gets
// its own deadline so that one hung request cannot use the whole budget.
func retry(ctx context.Context, f func(ctx context.Context) error) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = 30 * time.Second
	return backoff.Retry(func() error {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return f(actx)
	}, backoff.WithContext(bo, ctx))
}

// partitionNames names partition i "p<i>".
func partitionNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "p" + strconv.Itoa(i)
	}
	return out
}

func (b *combBackend) describe() string {
	pid := "not found"
	if b.pid > 0 {
		pid = strconv.Itoa(b.pid)
	}
	return fmt.Sprintf("Comb at %s (broker pid %s), %d NATS connections, %s client", b.cfg.RedactedURL(), pid, len(b.conns), b.cfg.Client)
}

func (b *combBackend) brokerPID() int { return b.pid }

func (b *combBackend) close() {
	for _, nc := range b.conns {
		nc.Close()
	}
}

func (b *combBackend) client(i int) *comb.Client { return b.clients[i%len(b.clients)] }

func (b *combBackend) push(ctx context.Context, part int, payloads [][]byte, ids msgIDs) (int, error) {
	if b.cfg.Client == ClientRaw {
		return b.raws[part%len(b.raws)].push(ctx, b.parts[part], payloads, b.cfg.Encoding, ids)
	}
	msgs := make([]comb.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = comb.Message{Partition: b.parts[part], Data: p, Headers: loadHeader(b.cfg.Headers)}
		if ids.on() {
			msgs[i].ID = ids.id(i)
		}
	}
	res, err := b.client(part).Push(ctx, b.cfg.Queue, msgs)
	if err != nil {
		return 0, err
	}
	dups := 0
	for _, r := range res {
		if err := pushStatus(r.Status, ids.on(), &dups); err != nil {
			return dups, err
		}
	}
	return dups, nil
}

func (b *combBackend) consume(ctx context.Context, id int, r *runner) {
	cfg := b.cfg
	cl := b.client(id)
	raw := b.raws[id%len(b.raws)]
	opts := comb.PopOptions{
		Group:      cfg.Group,
		Max:        cfg.PopBatch,
		Partitions: cfg.PopPartitions,
		Wait:       cfg.PopWait,
		Lease:      cfg.Lease,
		AutoAck:    !cfg.ManualAck,
	}
	body := popRequestBody(opts)
	// next is the last batch's acks while they wait to ride on the next
	// pop (AckNext).
	var next *settlement
	ack := func(ctx context.Context, acks []comb.Ack, msgs []comb.Delivery) ([]comb.AckResult, error) {
		switch {
		case cfg.Pipeline && cfg.Client == ClientRaw:
			return raw.txn(ctx, cfg.Group, acks, msgs, cfg.Encoding)
		case cfg.Pipeline:
			tas, pushes := txnOf(cfg.Queue, cfg.Group, acks, msgs, cfg.Headers)
			res, err := cl.Txn(ctx, tas, pushes)
			if err != nil {
				return nil, err
			}
			for _, r := range res.Push[0] {
				if r.Status != protocol.StatusStored {
					return nil, fmt.Errorf("txn: output status %q", r.Status)
				}
			}
			return res.Acks, nil
		case cfg.Client == ClientRaw:
			return raw.ack(ctx, cfg.Group, acks)
		}
		return cl.Ack(ctx, cfg.Queue, cfg.Group, acks)
	}
	// ackAlone settles st with a request of its own.
	ackAlone := func(st *settlement) {
		r.settle(func(actx context.Context) ackOutcome {
			t0 := time.Now()
			res, err := ack(actx, st.acks, st.msgs)
			return st.outcome(res, err, time.Since(t0), true)
		})
	}
	pop := func() ([]comb.Delivery, error) {
		if next != nil {
			st := next
			next = nil
			// Not cut short by the end of the run: the broker settles the
			// acks before it looks for messages, so a long poll cancelled
			// here would leave them settled unseen. It ends by its wait_ms.
			msgs, res, err := raw.popAcking(context.WithoutCancel(ctx), body, opts.Wait, st.acks, nil)
			if err != nil {
				// What became of the acks is unknown: they go alone.
				ackAlone(st)
				return msgs, err
			}
			// Settled with the pop: no round trip of their own to time.
			r.settle(func(context.Context) ackOutcome { return st.outcome(res, nil, 0, false) })
			return msgs, nil
		}
		if cfg.Client == ClientRaw {
			return raw.pop(ctx, body, opts.Wait, nil)
		}
		return cl.Pop(ctx, cfg.Queue, opts)
	}
	defer func() {
		if next != nil {
			// The run ended before the next pop: a batch received is acked.
			ackAlone(next)
		}
	}()
	backoff := time.Duration(0)
	var datas [][]byte
	for ctx.Err() == nil {
		msgs, err := pop()
		if ctx.Err() != nil {
			// A pop cut short by the end of the run is not a failure; what
			// it may have leased is delivered again when the lease ends.
			return
		}
		r.c.popReqs.Add(1)
		if err != nil {
			r.c.popFailReqs.Add(1)
			r.noteErr(errPop, err)
			backoff = min(max(2*backoff, popBackoffMin), popBackoffMax)
			if errors.Is(err, protocol.ErrBadRequest) {
				backoff = popBackoffMax
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		if len(msgs) == 0 {
			continue
		}
		datas = datas[:0]
		for i := range msgs {
			datas = append(datas, msgs[i].Data)
		}
		refs := r.deliver(time.Now(), datas)
		if !cfg.ManualAck {
			r.c.acked.Add(int64(len(msgs)))
			continue
		}
		st := &settlement{msgs: msgs, refs: refs}
		st.acks, st.spanOf, st.sizes = cumulativeAcks(msgs)
		if cfg.AckNext {
			next = st
			continue
		}
		ackAlone(st)
	}
}

// settlement is a popped batch to settle: its acks (cumulativeAcks) and
// what each settles.
type settlement struct {
	msgs   []comb.Delivery
	refs   []ref
	acks   []comb.Ack
	spanOf []int
	sizes  []int64
}

// outcome accounts the acks' results res (err when the request failed),
// answered after rtt (timed when that is the acks' own round trip).
func (st *settlement) outcome(res []comb.AckResult, err error, rtt time.Duration, timed bool) ackOutcome {
	o := ackOutcome{rtt: rtt, timed: timed}
	if err != nil {
		o.failed, o.err = true, err
		return o
	}
	for i, a := range res {
		if a.OK {
			o.acked += st.sizes[i]
		} else {
			o.failed = true
			o.err = fmt.Errorf("ack %s/%d: %w", st.acks[i].Partition, st.acks[i].Offset, a.Err())
		}
	}
	for i, s := range st.spanOf {
		if res[s].OK {
			o.done = append(o.done, st.refs[i])
		}
	}
	return o
}

// cumulativeAcks returns one completed ack per (partition, lease) of a
// batch, at its last offset; spanOf[i] is the ack of message i and
// sizes[j] the messages ack j settles.
func cumulativeAcks(msgs []comb.Delivery) (acks []comb.Ack, spanOf []int, sizes []int64) {
	type key struct{ partition, lease string }
	index := map[key]int{}
	spanOf = make([]int, len(msgs))
	for i, m := range msgs {
		k := key{m.Partition, m.Lease}
		j, ok := index[k]
		if !ok {
			j = len(acks)
			index[k] = j
			acks = append(acks, comb.Ack{Partition: m.Partition, Lease: m.Lease, Offset: m.Offset, Status: protocol.AckCompleted})
			sizes = append(sizes, 0)
		}
		acks[j].Offset = max(acks[j].Offset, m.Offset)
		sizes[j]++
		spanOf[i] = j
	}
	return acks, spanOf, sizes
}
