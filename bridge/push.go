package bridge

import (
	"encoding/base64"
	"errors"
	"hash/fnv"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// pushJob is one push or put request waiting for a push worker.
type pushJob struct {
	call  *call
	req   domain.PushParams
	size  int   // request bytes, held against Config.PendingBytes until answered
	quota int64 // message bytes, held against the tenant's max_bytes until answered
}

// preparePush is the first half of a push's handler (see stagedHandler):
// it runs on a decoder, or inline for a small body.
func (b *Bridge) preparePush(t *tenant, req micro.Request) func() {
	queue, err := b.queueOf(t, req)
	if err != nil {
		b.fail(t, req, err)
		return nil
	}
	if b.pushFull(t, req, protocol.VerbPush) {
		return nil
	}
	msgs, err := wire.DecodePush(req.Data(), b.lim)
	if err == nil {
		err = b.checkDeliverable(msgs)
	}
	if err != nil {
		b.fail(t, req, err)
		return nil
	}
	return func() { b.enqueuePush(t, req, protocol.VerbPush, queue, msgs) }
}

// preparePut is preparePush for a put.
func (b *Bridge) preparePut(t *tenant, req micro.Request) func() {
	queue, err := b.queueOf(t, req)
	if err != nil {
		b.fail(t, req, err)
		return nil
	}
	if b.pushFull(t, req, protocol.VerbPut) {
		return nil
	}
	msg, err := wire.DecodePut(req.Data(), req.Headers(), b.lim)
	msgs := []domain.PushMessage{msg}
	if err == nil {
		err = b.checkDeliverable(msgs)
	}
	if err != nil {
		b.fail(t, req, err)
		return nil
	}
	return func() { b.enqueuePush(t, req, protocol.VerbPut, queue, msgs) }
}

// pushFull refuses a push at once, before the work of decoding it, when
// the push path is already at one of its bounds. enqueuePush checks again
// exactly; this is only a cheap early answer under overload.
func (b *Bridge) pushFull(t *tenant, req micro.Request, verb string) bool {
	if b.pushQueued.Load() < int64(b.cfg.PushQueue) && b.pushBytes.Load()+int64(len(req.Data())) <= int64(b.cfg.PendingBytes) {
		return false
	}
	t.stats[verb].overloaded.Add(1)
	b.fail(t, req, protocol.Errorf(protocol.CodeTooMany, "overloaded, retry later"))
	return true
}

// holdWakeRound rounds the times at which delayed messages wake pops, so
// that a batch of them needs few timers, and is added once more: a wake a
// little late costs nothing, one a little early finds the message still
// held (PostgreSQL's clock set its ready time) and leaves the pop to its
// retry interval.
const holdWakeRound = 10 * time.Millisecond

// holdOf is how long after now a pushed message is held back by its own
// delay_ms or not_before.
func holdOf(m *domain.PushMessage, now time.Time) time.Duration {
	d := time.Duration(m.DelayMS) * time.Millisecond
	if !m.NotBefore.IsZero() {
		d = max(d, m.NotBefore.Sub(now))
	}
	return d
}

// replyReserve is room kept in a pop reply for everything around one
// message's data: names, offset, lease, time, and the envelope.
const replyReserve = 2048

// checkDeliverable refuses a message that no pop reply could carry under
// the NATS server's max_payload: storing it would block its partition.
func (b *Bridge) checkDeliverable(msgs []domain.PushMessage) error {
	limit := int(b.nc.MaxPayload())
	for i := range msgs {
		d, enc, h := msgs[i].Data, msgs[i].Encoding, len(msgs[i].Headers)
		// Most messages are far below the limit: skip the exact size.
		if base64.StdEncoding.EncodedLen(len(d))+h+replyReserve <= limit {
			continue
		}
		if n := wire.DataLen(d, enc) + h; n+replyReserve > limit {
			return protocol.Errorf(protocol.CodeTooLarge,
				"message %d: %d bytes would take %d in a pop reply, over the NATS server's max_payload of %d bytes",
				i, msgs[i].Size(), n+replyReserve, limit)
		}
	}
	return nil
}

// enqueuePush is the second half of a push's or put's handler: in the
// order the requests came, it admits msgs and hands them to a push worker.
func (b *Bridge) enqueuePush(t *tenant, req micro.Request, verb string, queue domain.QueueRef, msgs []domain.PushMessage) {
	held, err := t.quota.admitPush(msgs, time.Now())
	if err != nil {
		b.fail(t, req, err)
		return
	}
	c, ok := b.admit(t, req, verb)
	if !ok {
		t.quota.pushDone(held)
		return
	}
	size := len(req.Data())
	if b.pushBytes.Add(int64(size)) > int64(b.cfg.PendingBytes) {
		b.pushBytes.Add(-int64(size))
		t.quota.pushDone(held)
		b.overloaded(req, c)
		return
	}
	job := &pushJob{call: c, req: domain.PushParams{Queue: queue, Messages: msgs}, size: size, quota: held}
	if b.pushQueued.Add(1) > int64(b.cfg.PushQueue) {
		b.pushQueued.Add(-1)
		b.pushBytes.Add(-int64(size))
		t.quota.pushDone(held)
		b.overloaded(req, c)
		return
	}
	b.pushShard(job) <- job // never blocks: each channel holds PushQueue
}

// pushShard is the channel of a push: a push of one partition goes to
// the worker its queue and partition hash to, so that the pushes of a
// partition share that worker's transactions (one segment each, not one
// per request) and concurrent transactions of other workers never wait
// on its partition's row lock; they also commit in the order they came.
// A push of several partitions goes to whichever worker is free.
func (b *Bridge) pushShard(job *pushJob) chan *pushJob {
	msgs := job.req.Messages
	if len(msgs) == 0 {
		return b.pushCh
	}
	part := msgs[0].Partition
	for i := range msgs[1:] {
		if msgs[i+1].Partition != part {
			return b.pushCh
		}
	}
	h := fnv.New32a()
	h.Write([]byte(job.req.Queue.Tenant))
	h.Write([]byte{0})
	h.Write([]byte(job.req.Queue.Name))
	h.Write([]byte{0})
	h.Write([]byte(part))
	return b.pushShards[h.Sum32()%uint32(len(b.pushShards))]
}

// pushWorker runs push transactions: it takes one request, then every
// request already waiting up to the batch caps, pushes them all in one
// store call, and answers each after the commit.
//
// A worker takes the pushes of its own partitions (shard, see pushShard)
// first, then those of several partitions.
func (b *Bridge) pushWorker(shard chan *pushJob) {
	defer b.wg.Done()
	batch := make([]*pushJob, 0, 64)
	for {
		var first *pushJob
		select {
		case first = <-shard:
		case first = <-b.pushCh:
		case <-b.quit:
			return
		}
		batch = append(batch[:0], first)
		msgs, bytes := len(first.req.Messages), first.size
	fill:
		for msgs < b.cfg.BatchMessages && bytes < b.cfg.BatchBytes {
			var j *pushJob
			select {
			case j = <-shard:
			default:
				select {
				case j = <-b.pushCh:
				default:
					break fill
				}
			}
			batch = append(batch, j)
			msgs += len(j.req.Messages)
			bytes += j.size
		}
		b.pushQueued.Add(-int64(len(batch)))
		b.flushPush(batch)
		clear(batch)
	}
}

func (b *Bridge) flushPush(batch []*pushJob) {
	spooled, batch := b.spoolFirst(batch)
	if len(spooled) > 0 {
		b.spoolJobs(spooled)
	}
	if len(batch) == 0 {
		return
	}
	reqs := make([]domain.PushParams, len(batch))
	for i, j := range batch {
		reqs[i] = j.req
	}
	offers, waiters := b.pops.claimOffers(batch)
	ctx, cancel := b.storeCtx()
	began := time.Now()
	outs, handed, err := b.st.PushOffer(ctx, reqs, offers)
	took := time.Since(began)
	cancel()
	outs = oneEach(outs, len(batch), err, func(err error) domain.PushOutcome { return domain.PushOutcome{Err: err} })
	b.pushTx.Add(1)
	if err != nil {
		handed = nil
	}
	// A partition whose every group a hand-off served wakes nobody.
	var settled map[queuePartition]bool
	for i, h := range handed {
		if h.AllGroups {
			if settled == nil {
				settled = map[queuePartition]bool{}
			}
			settled[queuePartition{offers[i].Pop.Queue, offers[i].Partition}] = true
		}
	}
	var wake wakeSet
	delayed := map[time.Duration]*wakeSet{}
	for i, j := range batch {
		out := &outs[i]
		if out.Err == nil && err != nil {
			out.Err = err
		}
		if out.Err == nil && len(out.Results) != len(j.req.Messages) {
			out.Err = errResultCount
		}
		if out.Err != nil {
			continue
		}
		b.addPushWakes(&wake, delayed, j.req, out.Results, began, settled)
	}
	// Before the replies: a client that has its answer finds it counted.
	if b.obs != nil {
		b.obs.PushTx(took, reqs, outs)
	}
	// Wake pops first: the replies below do not depend on them.
	b.publishPushWakes(&wake, delayed)
	var unavailable []*pushJob
	for i, j := range batch {
		if outs[i].Err != nil && b.cfg.Spool != nil && errors.Is(outs[i].Err, domain.ErrUnavailable) {
			// PostgreSQL is away: the spool takes the pushes after this
			// one until the drainer reaches PostgreSQL again, and this
			// one too unless the connection broke after it was sent: it
			// may be committed, and spooling it could store it twice, so
			// it gets the 503 that may mean stored.
			b.pgDown.Store(true)
			if !errors.Is(outs[i].Err, domain.ErrOutcomeUnknown) {
				unavailable = append(unavailable, j)
				continue
			}
		}
		if outs[i].Err != nil {
			b.respondError(j.call, outs[i].Err)
		} else {
			b.respond(j.call, wire.PushReply(outs[i].Results))
		}
		b.pushBytes.Add(-int64(j.size))
		j.call.t.quota.pushDone(j.quota)
		b.finish(j.call)
	}
	// The pops served after the pushes, whose replies wait on nothing
	// else (either order measured the same, docs/benchmarks.md). When
	// the transaction failed, none was served (its outcome unknown: a
	// lease it may have committed expires as a lost reply's would); they
	// try again themselves.
	b.pops.settleOffers(waiters, handed)
	if len(unavailable) > 0 {
		b.spoolJobs(unavailable)
	}
}

// queuePartition names a partition of a queue.
type queuePartition struct {
	queue     domain.QueueRef
	partition string
}

// addPushWakes notes the wake-ups of a push's results: the partitions
// that stored messages, in wake, or in delayed: messages of a queue with
// delay_ms become ready only after it, and a message pushed with its own
// delay (and its partition's later ones) only after that: wake their pops
// then, not now. began is when the push's store call began. Settled
// partitions wake nobody: the push handed what it stored there to every
// group (handoff.go).
func (b *Bridge) addPushWakes(wake *wakeSet, delayed map[time.Duration]*wakeSet, req domain.PushParams, results []domain.PushResult, began time.Time, settled map[queuePartition]bool) {
	var queueDelay time.Duration
	if c, ok := b.st.CachedConfig(req.Queue); ok && c.DelayMS > 0 {
		queueDelay = time.Duration(c.DelayMS) * time.Millisecond
	}
	for k, r := range results {
		if r.Status != domain.Stored || settled[queuePartition{req.Queue, r.Partition}] {
			continue
		}
		w := wake
		if d := max(queueDelay, holdOf(&req.Messages[k], began)); d > 0 {
			d = d.Round(holdWakeRound) + holdWakeRound
			if delayed[d] == nil {
				delayed[d] = &wakeSet{}
			}
			w = delayed[d]
		}
		w.add(req.Queue, "", r.Partition)
		w.addCount(req.Queue, 1)
	}
}

// publishPushWakes publishes wake now, and each of delayed after its delay.
func (b *Bridge) publishPushWakes(wake *wakeSet, delayed map[time.Duration]*wakeSet) {
	b.publishWakes(wake)
	for d, w := range delayed {
		b.publishWakesAfter(d, w)
	}
}
