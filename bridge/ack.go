package bridge

import (
	"errors"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/store"
)

// errResultCount guards against a store reply that does not match its
// request; it is a bug, answered as a 500.
var errResultCount = errors.New("store returned a wrong number of results")

// ackJob is one ack request waiting for an ack worker.
type ackJob struct {
	call *call
	req  store.AckRequest
}

func (b *Bridge) handleAck(req micro.Request) {
	queue, err := b.queueOf(req)
	if err != nil {
		b.fail(req, err)
		return
	}
	group, acks, err := wire.DecodeAck(req.Data())
	if err != nil {
		b.fail(req, err)
		return
	}
	c, ok := b.admit(req, wire.VerbAck)
	if !ok {
		return
	}
	job := &ackJob{call: c, req: store.AckRequest{Queue: queue, Group: group, Acks: acks}}
	select {
	case b.ackCh <- job:
	default:
		b.overloaded(req, c)
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
	reqs := make([]*store.AckRequest, len(batch))
	for i, j := range batch {
		reqs[i] = &j.req
	}
	ctx, cancel := b.storeCtx()
	err := b.st.Ack(ctx, reqs)
	cancel()
	b.stats[wire.VerbAck].transactions.Add(1)
	// A settled ack may make messages of its partition deliverable again to
	// its group (retry, failed) or end the lease that held the partition
	// back from the group's other consumers: waiting pops of that group
	// may now find something.
	var wake wakeSet
	for _, j := range batch {
		if j.req.Err == nil && err != nil {
			j.req.Err = err
		}
		if j.req.Err == nil && len(j.req.Results) != len(j.req.Acks) {
			j.req.Err = errResultCount
		}
		if j.req.Err != nil {
			continue
		}
		for i, r := range j.req.Results {
			if r.OK {
				wake.add(j.req.Queue, j.req.Group, j.req.Acks[i].Partition)
			}
		}
	}
	b.publishWakes(&wake)
	for _, j := range batch {
		if j.req.Err != nil {
			b.respondError(j.call, j.req.Err)
		} else {
			b.respond(j.call, wire.AckReply(j.req.Results))
		}
		b.finish(j.call)
	}
}
