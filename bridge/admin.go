package bridge

import (
	"context"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/internal/wire"
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
func (b *Bridge) submit(req micro.Request, verb string, work func(ctx context.Context) ([]byte, error)) {
	c, ok := b.admit(req, verb)
	if !ok {
		return
	}
	f := func() {
		defer b.finish(c)
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

func (b *Bridge) handleRenew(req micro.Request) {
	queue, err := b.queueOf(req)
	if err != nil {
		b.fail(req, err)
		return
	}
	leases, leaseMS, err := wire.DecodeRenew(req.Data())
	if err != nil {
		b.fail(req, err)
		return
	}
	b.submit(req, wire.VerbRenew, func(ctx context.Context) ([]byte, error) {
		res, err := b.st.Renew(ctx, queue, leases, leaseMS)
		if err != nil {
			return nil, err
		}
		if len(res) != len(leases) {
			return nil, errResultCount
		}
		return wire.RenewReply(res), nil
	})
}

func (b *Bridge) handleConfigure(req micro.Request) {
	queue, err := b.queueOf(req)
	if err != nil {
		b.fail(req, err)
		return
	}
	patch, err := wire.DecodeConfigure(req.Data())
	if err != nil {
		b.fail(req, err)
		return
	}
	b.submit(req, wire.VerbConfigure, func(ctx context.Context) ([]byte, error) {
		cfg, err := b.st.Configure(ctx, queue, patch)
		if err != nil {
			return nil, err
		}
		return wire.ConfigReply(cfg), nil
	})
}

func (b *Bridge) handleInfo(req micro.Request) {
	queue, err := b.queueOf(req)
	if err != nil {
		b.fail(req, err)
		return
	}
	if err := wire.DecodeEmpty(req.Data()); err != nil {
		b.fail(req, err)
		return
	}
	b.submit(req, wire.VerbInfo, func(ctx context.Context) ([]byte, error) {
		info, err := b.st.Info(ctx, queue)
		if err != nil {
			return nil, err
		}
		return wire.InfoReply(info), nil
	})
}

func (b *Bridge) handleList(req micro.Request) {
	if _, err := b.queueOf(req); err != nil {
		b.fail(req, err)
		return
	}
	if err := wire.DecodeEmpty(req.Data()); err != nil {
		b.fail(req, err)
		return
	}
	b.submit(req, wire.VerbList, func(ctx context.Context) ([]byte, error) {
		queues, err := b.st.List(ctx)
		if err != nil {
			return nil, err
		}
		return wire.ListReply(queues), nil
	})
}

func (b *Bridge) handleDelete(req micro.Request) {
	queue, err := b.queueOf(req)
	if err != nil {
		b.fail(req, err)
		return
	}
	if err := wire.DecodeEmpty(req.Data()); err != nil {
		b.fail(req, err)
		return
	}
	b.submit(req, wire.VerbDelete, func(ctx context.Context) ([]byte, error) {
		if err := b.st.Delete(ctx, queue); err != nil {
			return nil, err
		}
		// Waiting pops of the deleted queue try again and learn it is gone.
		b.wakeAll(queue)
		return wire.OKReply, nil
	})
}

func (b *Bridge) handleSeek(req micro.Request) {
	queue, err := b.queueOf(req)
	if err != nil {
		b.fail(req, err)
		return
	}
	sk, err := wire.DecodeSeek(req.Data())
	if err != nil {
		b.fail(req, err)
		return
	}
	b.submit(req, wire.VerbSeek, func(ctx context.Context) ([]byte, error) {
		n, err := b.st.Seek(ctx, queue, sk.Group, sk.Partition, sk.To)
		if err != nil {
			return nil, err
		}
		// A rewound group may have messages ready for its waiting pops.
		b.wakeAll(queue)
		return wire.SeekReply(n), nil
	})
}

func (b *Bridge) handleDLQ(req micro.Request) {
	queue, err := b.queueOf(req)
	if err != nil {
		b.fail(req, err)
		return
	}
	d, err := wire.DecodeDLQ(req.Data())
	if err != nil {
		b.fail(req, err)
		return
	}
	b.submit(req, wire.VerbDLQ, func(ctx context.Context) ([]byte, error) {
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
		d.Query.Queue = queue
		dls, next, err := b.st.DeadLetters(ctx, d.Query)
		if err != nil {
			return nil, err
		}
		data, n := wire.DLQReply(dls, next, int(b.nc.MaxPayload()))
		if n == 0 && len(dls) > 0 {
			return nil, wire.Errorf(wire.CodeTooLarge,
				"dead letter %s does not fit in a reply under the NATS server's max_payload of %d bytes", dls[0].DLQID, b.nc.MaxPayload())
		}
		return data, nil
	})
}
