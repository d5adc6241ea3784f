package bridge

import (
	"encoding/base64"
	"errors"
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

func (b *Bridge) handlePush(t *tenant, req micro.Request) {
	queue, err := b.queueOf(t, req)
	if err != nil {
		b.fail(t, req, err)
		return
	}
	if b.pushFull(t, req, protocol.VerbPush) {
		return
	}
	msgs, err := wire.DecodePush(req.Data(), b.lim)
	if err != nil {
		b.fail(t, req, err)
		return
	}
	b.enqueuePush(t, req, protocol.VerbPush, queue, msgs)
}

func (b *Bridge) handlePut(t *tenant, req micro.Request) {
	queue, err := b.queueOf(t, req)
	if err != nil {
		b.fail(t, req, err)
		return
	}
	if b.pushFull(t, req, protocol.VerbPut) {
		return
	}
	h := req.Headers()
	msg, err := wire.DecodePut(req.Data(), header(h, protocol.HeaderPartition), header(h, protocol.HeaderID), b.lim)
	if err != nil {
		b.fail(t, req, err)
		return
	}
	b.enqueuePush(t, req, protocol.VerbPut, queue, []domain.PushMessage{msg})
}

// header returns a request header, matching its name exactly first and
// then without regard to case: NATS headers are case-sensitive, people
// typing `nats req -H` are not.
func header(h micro.Headers, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, v := range h {
		if len(v) > 0 && equalFold(k, name) {
			return v[0]
		}
	}
	return ""
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// pushFull refuses a push at once, before the work of decoding it, when
// the push path is already at one of its bounds. enqueuePush checks again
// exactly; this is only a cheap early answer under overload.
func (b *Bridge) pushFull(t *tenant, req micro.Request, verb string) bool {
	if len(b.pushCh) < cap(b.pushCh) && b.pushBytes.Load()+int64(len(req.Data())) <= int64(b.cfg.PendingBytes) {
		return false
	}
	t.stats[verb].overloaded.Add(1)
	b.fail(t, req, protocol.Errorf(protocol.CodeTooMany, "overloaded, retry later"))
	return true
}

// replyReserve is room kept in a pop reply for everything around one
// message's data: names, offset, lease, time, and the envelope.
const replyReserve = 2048

// checkDeliverable refuses a message that no pop reply could carry under
// the NATS server's max_payload: storing it would block its partition.
func (b *Bridge) checkDeliverable(msgs []domain.PushMessage) error {
	limit := int(b.nc.MaxPayload())
	for i := range msgs {
		d, enc := msgs[i].Data, msgs[i].Encoding
		// Most messages are far below the limit: skip the exact size.
		if base64.StdEncoding.EncodedLen(len(d))+replyReserve <= limit {
			continue
		}
		if n := wire.DataLen(d, enc); n+replyReserve > limit {
			return protocol.Errorf(protocol.CodeTooLarge,
				"message %d: %d bytes would take %d in a pop reply, over the NATS server's max_payload of %d bytes",
				i, len(d), n+replyReserve, limit)
		}
	}
	return nil
}

func (b *Bridge) enqueuePush(t *tenant, req micro.Request, verb string, queue domain.QueueRef, msgs []domain.PushMessage) {
	if err := b.checkDeliverable(msgs); err != nil {
		b.fail(t, req, err)
		return
	}
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
	select {
	case b.pushCh <- job:
	default:
		b.pushBytes.Add(-int64(size))
		t.quota.pushDone(held)
		b.overloaded(req, c)
	}
}

// pushWorker runs push transactions: it takes one request, then every
// request already waiting up to the batch caps, pushes them all in one
// store call, and answers each after the commit.
func (b *Bridge) pushWorker() {
	defer b.wg.Done()
	batch := make([]*pushJob, 0, 64)
	for {
		var first *pushJob
		select {
		case first = <-b.pushCh:
		case <-b.quit:
			return
		}
		batch = append(batch[:0], first)
		msgs, bytes := len(first.req.Messages), first.size
	fill:
		for msgs < b.cfg.BatchMessages && bytes < b.cfg.BatchBytes {
			select {
			case j := <-b.pushCh:
				batch = append(batch, j)
				msgs += len(j.req.Messages)
				bytes += j.size
			default:
				break fill
			}
		}
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
	ctx, cancel := b.storeCtx()
	began := time.Now()
	outs, err := b.st.Push(ctx, reqs)
	took := time.Since(began)
	cancel()
	outs = oneEach(outs, len(batch), err, func(err error) domain.PushOutcome { return domain.PushOutcome{Err: err} })
	b.pushTx.Add(1)
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
		// Messages of a queue with delay_ms become ready only after it:
		// wake its pops then, not now.
		w := &wake
		if c, ok := b.st.CachedConfig(j.req.Queue); ok && c.DelayMS > 0 {
			d := time.Duration(c.DelayMS) * time.Millisecond
			if delayed[d] == nil {
				delayed[d] = &wakeSet{}
			}
			w = delayed[d]
		}
		n := 0
		for _, r := range out.Results {
			if r.Status == domain.Stored {
				w.add(j.req.Queue, "", r.Partition)
				n++
			}
		}
		w.addCount(j.req.Queue, n)
	}
	// Before the replies: a client that has its answer finds it counted.
	if b.obs != nil {
		b.obs.PushTx(took, reqs, outs)
	}
	// Wake pops first: the replies below do not depend on them.
	b.publishWakes(&wake)
	for d, w := range delayed {
		b.publishWakesAfter(d, w)
	}
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
	if len(unavailable) > 0 {
		b.spoolJobs(unavailable)
	}
}
