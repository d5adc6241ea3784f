package comb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of ConsumeOptions.
const (
	DefaultAckInflight = 256
	DefaultConsumeWait = 5 * time.Second
	// DefaultRenewEvery is ConsumeOptions.RenewEvery without a Lease: a
	// third of the protocol's default lease (30 s).
	DefaultRenewEvery = 10 * time.Second
)

// Handler processes one batch of deliveries. Returning nil completes the
// whole batch; returning an error hands the whole batch back (see
// Client.Consume). The context is Consume's.
type Handler func(ctx context.Context, batch []Delivery) error

// ConsumeOptions are the options of Client.Consume. The zero value consumes
// for the default group with one pop loop.
type ConsumeOptions struct {
	// Group is the consumer group; empty means DefaultGroup.
	Group string
	// Max is the most messages per batch; 0 means the service's default.
	Max int
	// Partitions is the most partitions one pop (one batch) spans; 0 means 1.
	Partitions int
	// Wait is each pop's long-poll time; 0 means DefaultConsumeWait.
	Wait time.Duration
	// Lease overrides the queue's lease time. A batch must be handled and
	// acked within it, or it is delivered again, unless Consume renews it.
	Lease time.Duration
	// RenewEvery is how often Consume renews the leases of a batch while
	// its handler runs, so that a handler slower than the lease keeps its
	// messages; 0 means a third of Lease when set, else
	// DefaultRenewEvery (a third of the default lease_ms); negative never
	// renews. A lease is never renewed once its batch is settled.
	RenewEvery time.Duration
	// From says where the group starts on a partition it never read.
	From string
	// AckInflight caps the acks sent and not yet answered; 0 means
	// DefaultAckInflight. When it is reached the pop loops wait: an ack is
	// never dropped.
	AckInflight int
	// Concurrency is the number of pop loops, each calling the handler with
	// its own batches; 0 means 1. With more than one, the handler is called
	// concurrently, but not with two batches of one partition at once while
	// their leases hold: a group holds one lease per partition.
	Concurrency int
	// DrainTimeout bounds how long Consume waits for acks in flight when it
	// stops; 0 means the client's request timeout.
	DrainTimeout time.Duration
	// OnAckError, when set, is told about every ack that failed: a request
	// error or a refusal (an expired lease, typically). It is called from
	// the ack goroutines and must be safe for concurrent use. Such messages
	// are delivered again once their lease expires.
	OnAckError func(error)
	// OnPopError, when set, is told about every pop that failed and will be
	// retried after a backoff.
	OnPopError func(error)
	// Stats, when set, is updated as Consume runs.
	Stats *ConsumeStats
}

// ConsumeStats are the live counters of a Consume loop; read them with Load.
type ConsumeStats struct {
	// Popped counts messages delivered to the handler.
	Popped atomic.Int64
	// Acked counts messages settled as completed by an accepted ack.
	Acked atomic.Int64
	// Nacked counts messages handed back by an accepted failed or retry ack.
	Nacked atomic.Int64
	// AckErrors counts acks that failed or were refused.
	AckErrors atomic.Int64
	// HandlerErrors counts batches whose handler returned an error.
	HandlerErrors atomic.Int64
	// PopErrors counts pops that failed and were retried.
	PopErrors atomic.Int64
	// Renewed counts lease renewals accepted while handlers ran;
	// RenewErrors those that failed or were refused.
	Renewed     atomic.Int64
	RenewErrors atomic.Int64
}

// ErrDrainTimeout is returned by Consume when acks were still in flight
// after ConsumeOptions.DrainTimeout. Their messages are delivered again if
// the acks were lost.
var ErrDrainTimeout = errors.New("acks still in flight when consume stopped")

// Consume runs pop loops on a queue until ctx is cancelled, calling handler
// with each batch of deliveries.
//
// After the handler returns nil, Consume acks the batch with one cumulative
// "completed" ack per (partition, lease) at the last offset. When the
// handler returns an error, it acks "failed" at the first offset of each
// (partition, lease), so the whole batch is delivered again with its
// attempt counted, and dead-lettered once the queue's max_attempts are
// spent; if ctx was cancelled by then it acks "retry" instead, which spends
// no attempt. Acks are sent asynchronously, at most AckInflight at a time,
// so the next pop overlaps them; a failed ack is counted and reported to
// OnAckError, never fatal.
//
// While the handler runs, Consume renews the batch's leases every
// RenewEvery, so that a slow handler keeps its messages; it stops renewing
// before it acks, so a settled lease is never renewed.
//
// Pop errors are retried with a backoff, except ErrBadRequest, which stops
// Consume and is returned. When ctx is cancelled Consume stops popping,
// hands back any batch it has not yet given to the handler, waits for the
// acks in flight (at most DrainTimeout) and returns nil, or ErrDrainTimeout.
// A pop cancelled while long-polling may have leased messages nobody
// receives: they are delivered again when that lease expires.
func (c *Client) Consume(ctx context.Context, queue string, opts ConsumeOptions, handler Handler) error {
	if handler == nil {
		return fmt.Errorf("comb: consume %s: nil handler", queue)
	}
	if err := checkQueue(queue); err != nil {
		return fmt.Errorf("comb: consume %s: %w", queue, err)
	}
	if opts.Wait <= 0 {
		opts.Wait = DefaultConsumeWait
	}
	if opts.AckInflight <= 0 {
		opts.AckInflight = DefaultAckInflight
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = c.timeout
	}
	if opts.Stats == nil {
		opts.Stats = &ConsumeStats{}
	}
	if opts.RenewEvery == 0 {
		opts.RenewEvery = DefaultRenewEvery
		if opts.Lease > 0 {
			opts.RenewEvery = opts.Lease / 3
		}
	}
	cs := &consumer{
		c:       c,
		queue:   queue,
		opts:    opts,
		handler: handler,
		sem:     make(chan struct{}, opts.AckInflight),
		// Acks outlive ctx: a batch handled before the cancel is still acked.
		ackCtx: context.WithoutCancel(ctx),
	}

	loopCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var loops sync.WaitGroup
	for range opts.Concurrency {
		loops.Go(func() {
			if err := cs.loop(loopCtx); err != nil {
				stop(err)
			}
		})
	}
	loops.Wait()
	fatal := context.Cause(loopCtx)
	if errors.Is(fatal, context.Canceled) || errors.Is(fatal, context.DeadlineExceeded) {
		fatal = nil
	}

	drained := make(chan struct{})
	go func() {
		cs.acks.Wait()
		close(drained)
	}()
	timer := time.NewTimer(opts.DrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		if fatal == nil {
			fatal = fmt.Errorf("comb: consume %s: %w", queue, ErrDrainTimeout)
		}
	}
	return fatal
}

type consumer struct {
	c       *Client
	queue   string
	opts    ConsumeOptions
	handler Handler
	sem     chan struct{} // one token per ack in flight
	acks    sync.WaitGroup
	ackCtx  context.Context
}

// Backoff bounds of a failing pop loop.
const (
	popBackoffMin = 50 * time.Millisecond
	popBackoffMax = 2 * time.Second
)

// loop pops and handles batches until ctx is done; it returns only a fatal
// error.
func (cs *consumer) loop(ctx context.Context) error {
	pop := PopOptions{
		Group:      cs.opts.Group,
		Max:        cs.opts.Max,
		Partitions: cs.opts.Partitions,
		Wait:       cs.opts.Wait,
		Lease:      cs.opts.Lease,
		From:       cs.opts.From,
	}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		batch, err := cs.c.Pop(ctx, cs.queue, pop)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrBadRequest) {
				return fmt.Errorf("comb: consume %s: %w", cs.queue, err)
			}
			cs.opts.Stats.PopErrors.Add(1)
			if cs.opts.OnPopError != nil {
				cs.opts.OnPopError(err)
			}
			backoff = min(max(2*backoff, popBackoffMin), popBackoffMax)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		backoff = 0
		if len(batch) == 0 {
			continue
		}
		if ctx.Err() != nil {
			// Stopped between the pop and the handler: give the batch back
			// at once rather than let its lease run out.
			cs.settle(batch, AckRetry)
			return nil
		}
		cs.opts.Stats.Popped.Add(int64(len(batch)))
		stopRenew := cs.renewWhileHandled(batch)
		herr := cs.handler(ctx, batch)
		stopRenew() // before any ack: a settled lease is never renewed
		if herr != nil {
			cs.opts.Stats.HandlerErrors.Add(1)
			status := AckFailed
			if ctx.Err() != nil {
				status = AckRetry
			}
			cs.settle(batch, status)
			continue
		}
		cs.settle(batch, AckCompleted)
	}
	return nil
}

// renewWhileHandled renews the leases of batch every RenewEvery until the
// returned stop is called, and stop returns only once no renewal is in
// flight, so that an ack sent after it never races a renewal.
func (cs *consumer) renewWhileHandled(batch []Delivery) (stop func()) {
	if cs.opts.RenewEvery < 0 {
		return func() {}
	}
	var leases []string
	seen := map[string]bool{}
	for _, d := range batch {
		if d.Lease != "" && !seen[d.Lease] {
			seen[d.Lease] = true
			leases = append(leases, d.Lease)
		}
	}
	if len(leases) == 0 {
		return func() {}
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(cs.opts.RenewEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			res, err := cs.c.Renew(cs.ackCtx, cs.queue, leases, cs.opts.Lease)
			for i := range res {
				if !res[i].OK {
					err = fmt.Errorf("comb: renew %s lease %s: %s", cs.queue, res[i].Lease, res[i].Error)
				}
			}
			if err != nil {
				cs.opts.Stats.RenewErrors.Add(1)
				if cs.opts.OnAckError != nil {
					cs.opts.OnAckError(err)
				}
				continue
			}
			cs.opts.Stats.Renewed.Add(1)
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// settle sends one ack per (partition, lease) of batch, asynchronously:
// cumulative at the last offset for AckCompleted, at the first offset
// otherwise, so that nothing of the batch is settled. It waits for a free
// in-flight slot before each ack.
func (cs *consumer) settle(batch []Delivery, status string) {
	type key struct{ partition, lease string }
	type span struct {
		first, last int64
		n           int64
	}
	spans := make(map[key]*span)
	var order []key
	for _, d := range batch {
		if d.Lease == "" {
			continue // auto-acked: nothing to settle
		}
		k := key{d.Partition, d.Lease}
		s := spans[k]
		if s == nil {
			s = &span{first: d.Offset, last: d.Offset}
			spans[k] = s
			order = append(order, k)
		}
		s.first = min(s.first, d.Offset)
		s.last = max(s.last, d.Offset)
		s.n++
	}
	for _, k := range order {
		s := spans[k]
		a := Ack{Partition: k.partition, Lease: k.lease, Offset: s.first, Status: status}
		if status == AckCompleted {
			a.Offset = s.last
		}
		cs.sem <- struct{}{}
		cs.acks.Go(func() {
			defer func() { <-cs.sem }()
			cs.sendAck(a, s.n)
		})
	}
}

// sendAck sends one ack and records its outcome. Errors that prove the ack
// was not applied (no responder, 429 overloaded, 503) are retried a few
// times; a timeout is not, since the ack may have been applied and a second
// one would be refused.
func (cs *consumer) sendAck(a Ack, n int64) {
	const attempts = 3
	var err error
	for i := range attempts {
		var res []AckResult
		res, err = cs.c.Ack(cs.ackCtx, cs.queue, cs.opts.Group, []Ack{a})
		if err == nil {
			err = res[0].Err()
			if err == nil {
				if a.Status == AckCompleted {
					cs.opts.Stats.Acked.Add(n)
				} else {
					cs.opts.Stats.Nacked.Add(n)
				}
				return
			}
			err = fmt.Errorf("comb: ack %s %s/%d: %w", cs.queue, a.Partition, a.Offset, err)
			break
		}
		if !retryableAck(err) || i == attempts-1 {
			break
		}
		time.Sleep(time.Duration(i+1) * popBackoffMin)
	}
	cs.opts.Stats.AckErrors.Add(1)
	if cs.opts.OnAckError != nil {
		cs.opts.OnAckError(err)
	}
}

func retryableAck(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Temporary()
	}
	return errors.Is(err, nats.ErrNoResponders)
}
