package bridge

import (
	"cmp"
	"context"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// The verbs below are rare next to push, pop and ack: each runs its own
// store call on a small shared pool of workers.

func (b *Bridge) adminWorker() {
	defer b.wg.Done()
	for {
		select {
		case f := <-b.adminCh:
			f()
		case <-b.quit:
			return
		}
	}
}

// submit hands work for req to the admin workers. work returns the reply
// or an error; submit answers and accounts for the request.
func (b *Bridge) submit(t *tenant, req micro.Request, verb string, work func(ctx context.Context) ([]byte, error)) {
	c, ok := b.admit(t, req, verb)
	if !ok {
		return
	}
	f := func() {
		defer b.finish(c)
		if b.maintenance.Load() {
			b.respondError(c, errMaintenance)
			return
		}
		ctx, cancel := b.storeCtx()
		defer cancel()
		data, err := work(ctx)
		if err != nil {
			b.respondError(c, err)
			return
		}
		b.respond(c, data)
	}
	select {
	case b.adminCh <- f:
	default:
		b.overloaded(req, c)
	}
}

// serveAdmin answers an admin request: the queue from the subject and the
// body by parse, each a 400 when bad, then work on the admin workers.
func serveAdmin[T any](b *Bridge, t *tenant, req micro.Request, verb string, parse func([]byte) (T, error),
	work func(ctx context.Context, queue domain.QueueRef, in T) ([]byte, error)) {
	queue, err := b.queueOf(t, req)
	if err != nil {
		b.fail(t, req, err)
		return
	}
	in, err := parse(req.Data())
	if err != nil {
		b.fail(t, req, err)
		return
	}
	b.submit(t, req, verb, func(ctx context.Context) ([]byte, error) { return work(ctx, queue, in) })
}

// decodeEmpty is the parse of the verbs that take no fields.
func decodeEmpty(body []byte) (struct{}, error) { return struct{}{}, wire.DecodeEmpty(body) }

type renewBody struct {
	leases  []string
	leaseMS int64
}

func decodeRenew(body []byte) (renewBody, error) {
	leases, leaseMS, err := wire.DecodeRenew(body)
	return renewBody{leases, leaseMS}, err
}

func (b *Bridge) handleRenew(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbRenew, decodeRenew, func(ctx context.Context, queue domain.QueueRef, r renewBody) ([]byte, error) {
		res, err := b.st.Renew(ctx, domain.RenewParams{Queue: queue, Leases: r.leases, LeaseMS: r.leaseMS})
		if err != nil {
			return nil, err
		}
		if len(res) != len(r.leases) {
			return nil, errResultCount
		}
		return wire.RenewReply(res), nil
	})
}

func (b *Bridge) handleConfigure(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbConfigure, wire.DecodeConfigure, func(ctx context.Context, queue domain.QueueRef, patch domain.ConfigPatch) ([]byte, error) {
		cfg, err := b.st.Configure(ctx, queue, patch)
		if err != nil {
			return nil, err
		}
		return wire.ConfigReply(cfg), nil
	})
}

func (b *Bridge) handleInfo(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbInfo, wire.DecodeInfo, func(ctx context.Context, queue domain.QueueRef, at domain.InfoParams) ([]byte, error) {
		at.Queue = queue
		info, err := b.st.Info(ctx, at)
		if err != nil {
			return nil, err
		}
		data, n := wire.InfoReply(info, at, int(b.nc.MaxPayload()))
		if n == 0 && len(info.Partitions)+len(info.Groups) > 0 {
			return nil, protocol.Errorf(protocol.CodeTooLarge,
				"info of queue %q: not one name fits in a reply under the NATS server's max_payload of %d bytes", queue.Name, b.nc.MaxPayload())
		}
		return data, nil
	})
}

func (b *Bridge) handleList(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbList, wire.DecodeList, func(ctx context.Context, _ domain.QueueRef, at domain.ListParams) ([]byte, error) {
		at.Tenant = t.name
		list, err := b.st.List(ctx, at)
		if err != nil {
			return nil, err
		}
		data, n := wire.ListReply(list, int(b.nc.MaxPayload()))
		if n == 0 && len(list.Queues) > 0 {
			return nil, protocol.Errorf(protocol.CodeTooLarge,
				"list: not one queue fits in a reply under the NATS server's max_payload of %d bytes", b.nc.MaxPayload())
		}
		return data, nil
	})
}

func (b *Bridge) handleDelete(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbDelete, decodeEmpty, func(ctx context.Context, queue domain.QueueRef, _ struct{}) ([]byte, error) {
		if err := b.st.Delete(ctx, queue); err != nil {
			return nil, err
		}
		// Waiting pops of the deleted queue try again and learn it is gone.
		b.wakeAll(queue)
		return wire.OKReply, nil
	})
}

func (b *Bridge) handleSeek(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbSeek, wire.DecodeSeek, func(ctx context.Context, queue domain.QueueRef, sk domain.SeekParams) ([]byte, error) {
		sk.Queue = queue
		n, err := b.st.Seek(ctx, sk)
		if err != nil {
			return nil, err
		}
		// A rewound group may have messages ready for its waiting pops,
		// and other bridges must read it anew.
		b.wakeReread(queue, cmp.Or(sk.Group, protocol.DefaultGroup))
		return wire.SeekReply(n), nil
	})
}

func (b *Bridge) handleDLQ(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbDLQ, wire.DecodeDLQ, func(ctx context.Context, queue domain.QueueRef, d wire.DLQ) ([]byte, error) {
		switch d.Op {
		case wire.DLQReplay:
			n, err := b.st.ReplayDeadLetters(ctx, queue, d.IDs)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				b.wakeAll(queue)
			}
			return wire.DoneReply(n), nil
		case wire.DLQPurge:
			n, err := b.st.PurgeDeadLetters(ctx, queue, d.IDs)
			if err != nil {
				return nil, err
			}
			return wire.DoneReply(n), nil
		}
		d.Params.Queue = queue
		dls, next, err := b.st.DeadLetters(ctx, d.Params)
		if err != nil {
			return nil, err
		}
		data, n := wire.DLQReply(dls, next, int(b.nc.MaxPayload()))
		if n == 0 && len(dls) > 0 {
			return nil, protocol.Errorf(protocol.CodeTooLarge,
				"dead letter %s does not fit in a reply under the NATS server's max_payload of %d bytes", dls[0].DLQID, b.nc.MaxPayload())
		}
		return data, nil
	})
}

// handleGroups lists a queue's groups, or deletes one ({"delete":"g"}).
// Both are one verb, as dlq's listing, replay and purge are: the body says
// what to do with the queue's groups, and the subject stays one per queue.
func (b *Bridge) handleGroups(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbGroups, wire.DecodeGroups, func(ctx context.Context, queue domain.QueueRef, del string) ([]byte, error) {
		if del != "" {
			if err := b.st.DeleteGroup(ctx, queue, del); err != nil {
				return nil, err
			}
			return wire.OKReply, nil
		}
		groups, err := b.st.Groups(ctx, queue)
		if err != nil {
			return nil, err
		}
		return wire.GroupsReply(groups), nil
	})
}

// handlePeek reads a partition's messages, leasing nothing.
func (b *Bridge) handlePeek(t *tenant, req micro.Request) {
	serveAdmin(b, t, req, protocol.VerbPeek, wire.DecodePeek, func(ctx context.Context, queue domain.QueueRef, pk domain.PeekParams) ([]byte, error) {
		pk.Queue = queue
		page, err := b.st.Peek(ctx, pk)
		if err != nil {
			return nil, err
		}
		data, n := wire.PeekReply(page, int(b.nc.MaxPayload()))
		if n == 0 && len(page.Messages) > 0 {
			m := page.Messages[0]
			return nil, protocol.Errorf(protocol.CodeTooLarge,
				"message at offset %d does not fit in a reply under the NATS server's max_payload of %d bytes", m.Offset, b.nc.MaxPayload())
		}
		return data, nil
	})
}
