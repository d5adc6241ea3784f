package bridge

import (
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// handleTxn takes a transaction, "<prefix>.txn": acks and pushes on the
// tenant's queues, settled in one store call on the admin workers. Its
// pushes count against the push path's pending bytes and the tenant's push
// quotas as a push's do; it is never spooled (an ack cannot be), so
// without PostgreSQL it is a 503.
func (b *Bridge) handleTxn(t *tenant, req micro.Request) {
	if b.pushFull(t, req, protocol.VerbTxn) {
		return
	}
	p, err := wire.DecodeTxn(req.Data(), b.lim)
	if err != nil {
		b.fail(t, req, err)
		return
	}
	var msgs []domain.PushMessage
	for i := range p.Push {
		p.Push[i].Queue.Tenant = t.name
		if err := b.checkDeliverable(p.Push[i].Messages); err != nil {
			we, _ := protocol.AsError(err)
			b.fail(t, req, protocol.Errorf(we.Code, "push[%d]: %s", i, we.Message))
			return
		}
		msgs = append(msgs, p.Push[i].Messages...)
	}
	for i := range p.Acks {
		p.Acks[i].Queue.Tenant = t.name
	}
	// Acks alone are no push: a tenant over its quota may still settle.
	var held int64
	if len(msgs) > 0 {
		if held, err = t.quota.admitPush(msgs, time.Now()); err != nil {
			b.fail(t, req, err)
			return
		}
	}
	c, ok := b.admit(t, req, protocol.VerbTxn)
	if !ok {
		t.quota.pushDone(held)
		return
	}
	size := int64(len(req.Data()))
	release := func() {
		b.pushBytes.Add(-size)
		t.quota.pushDone(held)
	}
	if b.pushBytes.Add(size) > int64(b.cfg.PendingBytes) {
		release()
		b.overloaded(req, c)
		return
	}
	f := func() {
		defer b.finish(c)
		defer release()
		if b.maintenance.Load() {
			b.respondError(c, errMaintenance)
			return
		}
		ctx, cancel := b.storeCtx()
		began := time.Now()
		res, err := b.st.Txn(ctx, p)
		took := time.Since(began)
		cancel()
		if err == nil && !resultsMatch(p, res) {
			err = errResultCount
		}
		if err != nil {
			b.respondError(c, err)
			return
		}
		b.txnWakes(p, res, began)
		// Before the reply: a client that has its answer finds it counted.
		if b.obs != nil {
			b.observeTxn(took, p, res)
		}
		b.respond(c, wire.TxnReply(res))
	}
	select {
	case b.adminCh <- f:
	default:
		release()
		b.overloaded(req, c)
	}
}

// resultsMatch reports whether the store gave one result per ack and per
// pushed message, as it must.
func resultsMatch(p domain.TxnParams, res domain.TxnResult) bool {
	if len(res.Acks) != len(p.Acks) || len(res.Push) != len(p.Push) {
		return false
	}
	for i := range p.Push {
		if len(res.Push[i]) != len(p.Push[i].Messages) {
			return false
		}
	}
	return true
}

// txnWakes wakes the pops a committed transaction may have given
// something: those of the queues it pushed to, as a push does, and those
// of the groups whose partitions its acks freed or made deliverable (at
// once, or when a retry's hold ends), as an ack does.
func (b *Bridge) txnWakes(p domain.TxnParams, res domain.TxnResult, began time.Time) {
	var wake wakeSet
	delayed := map[time.Duration]*wakeSet{}
	for i, a := range p.Acks {
		b.addAckWake(&wake, &delayed, a.Queue, a.Group, a.Partition, res.Acks[i], began)
	}
	for i, ps := range p.Push {
		b.addPushWakes(&wake, delayed, ps, res.Push[i], began, nil)
	}
	b.publishPushWakes(&wake, delayed)
}

// observeTxn reports a committed transaction to the observer as the ack
// call and the push transaction it holds, so that the queues' figures
// (pushed, acked, dead) count it like the verbs it combines.
func (b *Bridge) observeTxn(took time.Duration, p domain.TxnParams, res domain.TxnResult) {
	if len(p.Acks) > 0 {
		acks := make([]domain.AckParams, len(p.Acks))
		outs := make([]domain.AckOutcome, len(p.Acks))
		for i, a := range p.Acks {
			acks[i] = domain.AckParams{Queue: a.Queue, Group: a.Group, Acks: []domain.Ack{a.Ack}}
			outs[i] = domain.AckOutcome{Results: res.Acks[i : i+1]}
		}
		b.obs.AckTx(took, acks, outs)
	}
	if len(p.Push) > 0 {
		outs := make([]domain.PushOutcome, len(p.Push))
		for i := range p.Push {
			outs[i] = domain.PushOutcome{Results: res.Push[i]}
		}
		b.obs.PushTx(took, p.Push, outs)
	}
}
