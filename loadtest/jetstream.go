package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/combmq/comb/protocol"
)

// jetStreamBackend runs the same workload against what a user would pick
// instead of Comb: a nats-server with JetStream, started in this process
// on a file store in a temporary directory and reached over loopback TCP
// like Comb.
//
// The queue is a work-queue stream on the subjects <queue>.p<i>, one per
// partition. Each loader consumer owns a durable pull consumer filtered on
// its share of the partitions (a work-queue stream requires consumers that
// do not overlap), so, like a Comb group, every partition is read by one
// consumer at a time and in order. Consumers take messages through the
// client's pull iterator, which keeps pull requests overlapping, and ack
// every message explicitly: with AckAsync by Ack, JetStream's own
// fire-and-forget ack (no round trip to time, so no ack rtt and no
// after-ack check); without it by DoubleAck, which waits for the server.
// A push request of PushBatch messages is PushBatch asynchronous publishes
// awaited together.
type jetStreamBackend struct {
	cfg       *Config
	sync      JetStreamSync
	log       *slog.Logger
	dir       string
	srv       *server.Server
	conns     []*nats.Conn
	js        []jetstream.JetStream
	subjects  []string
	consumers []jetstream.Consumer
}

// jsPublishTimeout bounds the wait for one push request's publish acks.
const jsPublishTimeout = 10 * time.Second

func newJetStreamBackend(ctx context.Context, cfg *Config, sync JetStreamSync, log *slog.Logger) (_ *jetStreamBackend, err error) {
	b := &jetStreamBackend{cfg: cfg, sync: sync, log: log}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	b.dir, err = os.MkdirTemp("", "comb-loadtest-js-")
	if err != nil {
		return nil, fmt.Errorf("jetstream store dir: %w", err)
	}
	opts := &server.Options{
		ServerName: "comb-loadtest-js",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   b.dir,
		NoLog:      true,
		NoSigs:     true,
		// The max_payload Comb's embedded server runs with by default, so
		// that both targets take and deliver messages of the same sizes:
		// MaxRequestBytes, not MaxMessageBytes, since the bound is on a
		// NATS message (a request or reply), not on one queue message.
		MaxPayload: protocol.MaxRequestBytes,
	}
	if sync == SyncAlways {
		opts.SyncAlways = true
	}
	cfg.urlAuth(opts)
	b.srv, err = server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("jetstream server: %w", err)
	}
	go b.srv.Start()
	if !b.srv.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("jetstream server: not ready after 10s")
	}
	for i := range cfg.Conns {
		nc, err := nats.Connect(b.srv.ClientURL(), append(cfg.urlUserInfo(), nats.Name("comb-loadtest-js-"+strconv.Itoa(i)))...)
		if err != nil {
			return nil, fmt.Errorf("connect to jetstream: %w", err)
		}
		b.conns = append(b.conns, nc)
		// Room for every message the open loop may have in flight, so a
		// publish never stalls on the client's own cap (that would count as
		// a failed push the server did not cause).
		pending := max(4096, min(cfg.MaxInflight*cfg.PushBatch, 1<<20))
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(pending))
		if err != nil {
			return nil, fmt.Errorf("jetstream context: %w", err)
		}
		b.js = append(b.js, js)
	}
	for i := range cfg.Partitions {
		b.subjects = append(b.subjects, cfg.Queue+".p"+strconv.Itoa(i))
	}
	stream := streamName(cfg.Queue)
	if _, err := b.js[0].CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:      stream,
		Subjects:  []string{cfg.Queue + ".>"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
		Replicas:  1,
		// JetStream tracks only messages with a Nats-Msg-Id, which push
		// sets when DedupWindow is on; zero leaves the server's default.
		Duplicates: cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", stream, err)
	}
	// One consumer per loader consumer, at most one per partition.
	n := min(cfg.Consumers, cfg.Partitions)
	for id := range n {
		var filters []string
		for p := id; p < cfg.Partitions; p += n {
			filters = append(filters, b.subjects[p])
		}
		cc := jetstream.ConsumerConfig{
			Durable:        "loadtest-" + strconv.Itoa(id),
			FilterSubjects: filters,
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        cfg.Lease,
			MaxAckPending:  max(1000, 4*cfg.PopBatch),
			DeliverPolicy:  jetstream.DeliverAllPolicy,
		}
		if !cfg.ManualAck {
			cc.AckPolicy = jetstream.AckNonePolicy
		}
		cons, err := b.js[id%len(b.js)].CreateOrUpdateConsumer(ctx, stream, cc)
		if err != nil {
			return nil, fmt.Errorf("create consumer %d: %w", id, err)
		}
		b.consumers = append(b.consumers, cons)
	}
	return b, nil
}

// streamName makes a stream name of a queue name: no dots allowed.
func streamName(queue string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(queue))
}

func (b *jetStreamBackend) describe() string {
	sync := "sync_interval default (2m)"
	if b.sync == SyncAlways {
		sync = "sync_interval always"
	}
	dedup := ""
	if b.cfg.DedupWindow > 0 {
		dedup = fmt.Sprintf(", Nats-Msg-Id on every message with a %s duplicate window", b.cfg.DedupWindow)
	}
	return fmt.Sprintf("embedded JetStream at %s, file store in %s, %s, work-queue stream%s, %d pull consumers, explicit acks (broker shares the loader's process: its memory and CPU include the loader's)",
		b.srv.ClientURL(), b.dir, sync, dedup, len(b.consumers))
}

func (b *jetStreamBackend) brokerPID() int { return os.Getpid() }

func (b *jetStreamBackend) close() {
	for _, nc := range b.conns {
		nc.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	if b.dir != "" {
		if err := os.RemoveAll(b.dir); err != nil {
			b.log.Warn("loadtest: remove jetstream store", "dir", b.dir, "err", err)
		}
	}
}

func (b *jetStreamBackend) push(ctx context.Context, part int, payloads [][]byte, ids msgIDs) (int, error) {
	js := b.js[part%len(b.js)]
	subj := b.subjects[part]
	futures := make([]jetstream.PubAckFuture, 0, len(payloads))
	var firstErr error
	var opts []jetstream.PublishOpt
	hdr := loadHeader(b.cfg.Headers)
	for i, p := range payloads {
		if ids.on() {
			opts = append(opts[:0], jetstream.WithMsgID(ids.id(i)))
		}
		var f jetstream.PubAckFuture
		var err error
		if hdr != nil {
			f, err = js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: p, Header: hdr}, opts...)
		} else {
			f, err = js.PublishAsync(subj, p, opts...)
		}
		if err != nil {
			firstErr = fmt.Errorf("publish: %w", err)
			break
		}
		futures = append(futures, f)
	}
	timer := time.NewTimer(jsPublishTimeout)
	defer timer.Stop()
	dups := 0
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				dups++
			}
		case err := <-f.Err():
			if firstErr == nil {
				firstErr = fmt.Errorf("publish ack: %w", err)
			}
		case <-timer.C:
			return dups, errors.New("publish ack: no answer within " + jsPublishTimeout.String())
		case <-ctx.Done():
			return dups, ctx.Err()
		}
	}
	return dups, firstErr
}

func (b *jetStreamBackend) consume(ctx context.Context, id int, r *runner) {
	if id >= len(b.consumers) {
		return // more loader consumers than partitions: nothing to own
	}
	cfg := b.cfg
	it, err := b.consumers[id].Messages(jetstream.PullMaxMessages(cfg.PopBatch))
	if err != nil {
		r.c.popFailReqs.Add(1)
		r.noteErr(errPop, err)
		return
	}
	defer it.Stop()
	datas := make([][]byte, 1)
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.c.popFailReqs.Add(1)
			r.noteErr(errPop, err)
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			continue
		}
		r.c.popReqs.Add(1)
		datas[0] = msg.Data()
		refs := r.deliver(time.Now(), datas)
		switch {
		case !cfg.ManualAck:
			r.c.acked.Add(1)
		case cfg.AckAsync:
			err := msg.Ack()
			r.c.ackReqs.Add(1)
			if err != nil {
				r.c.ackFailReqs.Add(1)
				r.noteErr(errAck, err)
			} else {
				r.c.acked.Add(1)
			}
		default:
			r.settle(func(actx context.Context) ackOutcome {
				actx, cancel := context.WithTimeout(actx, 10*time.Second)
				defer cancel()
				t0 := time.Now()
				err := msg.DoubleAck(actx)
				o := ackOutcome{rtt: time.Since(t0), timed: true}
				if err != nil {
					o.failed, o.err = true, err
					return o
				}
				o.acked, o.done = 1, refs
				return o
			})
		}
	}
}
