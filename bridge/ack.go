package bridge

import (
	"cmp"
	"errors"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// errResultCount guards against a store reply that does not match its
// request; it is a bug, answered as a 500.
var errResultCount = errors.New("store returned a wrong number of results")

// oneEach returns outs when the store gave one outcome per request, as it
// must; else n outcomes that each carry err (errResultCount when the store
// said nothing), so that every request is answered.
func oneEach[T any](outs []T, n int, err error, failed func(error) T) []T {
	if len(outs) == n {
		return outs
	}
	outs = make([]T, n)
	for i := range outs {
		outs[i] = failed(cmp.Or(err, errResultCount))
	}
	return outs
}

// ackWakes says whether an ack of partition of queue, settled by a store
// call that began at began, should wake its group's waiting pops: when it
// may have made messages deliverable (More), or when it freed the
// partition and a push's wake-up named it during the call, which the ack's
// snapshot may have missed (see wakeLog).
func (p *popper) ackWakes(queue domain.QueueRef, partition string, r domain.AckResult, began time.Time) bool {
	return r.OK && (r.More || r.Freed && p.log.namedSince(queue, partition, began))
}

// ackJob is one ack request waiting for an ack worker: an ack's, or the
// acks a pop carries (then is set: the pop goes on with their outcome, and
// answers its call itself).
type ackJob struct {
	call *call
	req  domain.AckParams
	then func(domain.AckOutcome)
}

// prepareAck is the first half of an ack's handler (see stagedHandler).
// Acks keep no order: the second half runs on the decoder.
func (b *Bridge) prepareAck(t *tenant, req micro.Request) func() {
	queue, err := b.queueOf(t, req)
	if err != nil {
		b.fail(t, req, err)
		return nil
	}
	group, acks, err := wire.DecodeAck(req.Data())
	if err != nil {
		b.fail(t, req, err)
		return nil
	}
	return func() {
		c, ok := b.admit(t, req, protocol.VerbAck)
		if !ok {
			return
		}
		job := &ackJob{call: c, req: domain.AckParams{Queue: queue, Group: group, Acks: acks}}
		select {
		case b.ackCh <- job:
		default:
			b.overloaded(req, c)
		}
	}
}

// ackWorker settles acks like pushWorker pushes: one store call for every
// ack request waiting, up to BatchAcks acks.
func (b *Bridge) ackWorker() {
	defer b.wg.Done()
	batch := make([]*ackJob, 0, 64)
	for {
		var first *ackJob
		select {
		case first = <-b.ackCh:
		case <-b.quit:
			return
		}
		batch = append(batch[:0], first)
		n := len(first.req.Acks)
	fill:
		for n < b.cfg.BatchAcks {
			select {
			case j := <-b.ackCh:
				batch = append(batch, j)
				n += len(j.req.Acks)
			default:
				break fill
			}
		}
		b.flushAck(batch)
		clear(batch)
	}
}

func (b *Bridge) flushAck(batch []*ackJob) {
	reqs := make([]domain.AckParams, len(batch))
	for i, j := range batch {
		reqs[i] = j.req
	}
	ctx, cancel := b.storeCtx()
	began := time.Now()
	var outs []domain.AckOutcome
	var err error
	if b.maintenance.Load() {
		err = errMaintenance
	} else {
		outs, err = b.st.Ack(ctx, reqs)
	}
	took := time.Since(began)
	cancel()
	outs = oneEach(outs, len(batch), err, func(err error) domain.AckOutcome { return domain.AckOutcome{Err: err} })
	b.ackTx.Add(1)
	// A settled ack may make messages of its partition deliverable again to
	// its group (retry, failed) or end the lease that held the partition
	// back from the group's other consumers: waiting pops of that group
	// may then find something (More), and so may one whose partition a
	// push's wake-up named during the call (see wakeLog). An ack within
	// its lease, or one that ends it with nothing behind, wakes nobody:
	// those pops would find nothing. An ack that holds its partition back
	// (a retry delay) wakes them when the hold ends.
	var wake wakeSet
	var delayed map[time.Duration]*wakeSet // made on the first hold: rare
	for i, j := range batch {
		out := &outs[i]
		if out.Err == nil && err != nil {
			out.Err = err
		}
		if out.Err == nil && len(out.Results) != len(j.req.Acks) {
			out.Err = errResultCount
		}
		if out.Err != nil {
			continue
		}
		for k, r := range out.Results {
			b.addAckWake(&wake, &delayed, j.req.Queue, j.req.Group, j.req.Acks[k].Partition, r, began)
		}
	}
	b.publishWakes(&wake)
	for d, w := range delayed {
		b.publishWakesAfter(d, w)
	}
	// Before the replies: a client that has its answer finds it counted.
	if b.obs != nil {
		b.obs.AckTx(took, reqs, outs)
	}
	for i, j := range batch {
		if j.then != nil {
			j.then(outs[i])
			continue
		}
		if outs[i].Err != nil {
			b.respondError(j.call, outs[i].Err)
		} else {
			b.respond(j.call, wire.AckReply(outs[i].Results))
		}
		b.finish(j.call)
	}
}

// addAckWake notes the wake-up an ack's result calls for: its group's pops
// of its partition now (ackWakes), or when the hold it put on the
// partition ends. *delayed is made on the first hold: holds are rare.
func (b *Bridge) addAckWake(wake *wakeSet, delayed *map[time.Duration]*wakeSet, queue domain.QueueRef, group, part string, r domain.AckResult, began time.Time) {
	switch {
	case r.OK && r.Hold > 0:
		if *delayed == nil {
			*delayed = map[time.Duration]*wakeSet{}
		}
		if (*delayed)[r.Hold] == nil {
			(*delayed)[r.Hold] = &wakeSet{}
		}
		(*delayed)[r.Hold].add(queue, group, part)
	case b.pops.ackWakes(queue, part, r, began):
		wake.add(queue, group, part)
	}
}
