// Package metrics is Comb's Prometheus metrics: the bridge's and the
// store's figures as collectors on an injected registry.
//
// The bridge's figures (messages, bytes, latencies, messages per
// transaction) are counted where its workers learn them, through the
// bridge.Observer that Metrics implements: a few atomic additions per
// transaction and per request. The store's figures (depth, lag and leases
// per group, the connection pools) are read when Prometheus scrapes, and
// the store's read is cached for CacheFor, so a burst of scrapes costs
// PostgreSQL one query.
//
// Label cardinality is bounded: the first MaxQueues queues seen get their
// own queue label, and every later one is counted under queue="_other" of
// its tenant; likewise the first MaxQueues (queue, group) pairs get their
// own group label and later ones group="_other". Tenants are NATS
// accounts, bounded by the configuration.
package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/spool"
	"github.com/combmq/comb/store"
)

// Defaults of Options' zero fields.
const (
	DefaultMaxQueues = 1000
	DefaultCacheFor  = time.Second
)

// Other is the queue (and group) label value of the queues (groups) past
// the cardinality cap.
const Other = "_other"

// Options tune Metrics. The zero value is usable.
type Options struct {
	// MaxQueues is how many queues get a queue label of their own, and
	// how many (queue, group) pairs a group label; 0 means
	// DefaultMaxQueues.
	MaxQueues int
	// Store, when set, is read on scrape for the groups' figures and the
	// pools'.
	Store *store.Store
	// CacheFor is how long a read of the store's group figures serves
	// scrapes; 0 means DefaultCacheFor.
	CacheFor time.Duration
	// Timeout bounds that read; 0 means 5 s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Metrics holds Comb's metrics, registered on one registry. It implements
// bridge.Observer; give it to bridge.Config.Observer.
type Metrics struct {
	opts Options
	log  *slog.Logger

	pushedMsgs, pushedBytes, duplicates  *prometheus.CounterVec
	poppedMsgs, poppedBytes, redelivered *prometheus.CounterVec
	acked, retried, deadMsgs, deadBytes  *prometheus.CounterVec
	ackRefused                           *prometheus.CounterVec
	requestDur, commitDur, txMessages    *prometheus.HistogramVec
	commitPush, commitAck, commitPop     prometheus.Observer
	txPush, txAck, txPop                 prometheus.Observer
	requestObs                           sync.Map // reqKey -> prometheus.Observer
	mu                                   sync.RWMutex
	queues                               map[domain.QueueRef]*queueSeries
	groups                               map[groupRef]string // group label of each admitted pair
	nQueues, nGroups                     int
	bridgeStats                          func() bridge.Stats
	spoolStats                           func() (spool.Stats, bool)
	figs                                 figuresCache
}

var _ bridge.Observer = (*Metrics)(nil)

type reqKey struct{ tenant, verb string }

type groupRef struct {
	queue domain.QueueRef
	group string
}

// queueSeries are one queue label's counters, looked up once per queue
// per transaction.
type queueSeries struct {
	label                                string // the queue label: the name or Other
	pushedMsgs, pushedBytes, duplicates  prometheus.Counter
	poppedMsgs, poppedBytes, redelivered prometheus.Counter
	acked, retried, deadMsgs, deadBytes  prometheus.Counter
	ackRefused                           prometheus.Counter
}

// Latency buckets: 0.5 ms to 16 s. Message buckets: 1 to 16384.
var (
	latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)
	countBuckets   = prometheus.ExponentialBuckets(1, 2, 15)
)

// New returns Comb's metrics registered on reg, with the Go runtime's and
// the process's collectors.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	if opts.MaxQueues <= 0 {
		opts.MaxQueues = DefaultMaxQueues
	}
	if opts.CacheFor <= 0 {
		opts.CacheFor = DefaultCacheFor
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ql := []string{"tenant", "queue"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, ql)
	}
	m := &Metrics{
		opts:   opts,
		log:    log,
		queues: map[domain.QueueRef]*queueSeries{},
		groups: map[groupRef]string{},

		pushedMsgs:  counter("comb_pushed_messages_total", "Messages stored by pushes and puts (duplicates excluded)."),
		pushedBytes: counter("comb_pushed_bytes_total", "Data bytes of the messages stored by pushes and puts."),
		duplicates:  counter("comb_pushed_duplicates_total", "Pushed messages answered as duplicates of a stored producer id."),
		poppedMsgs:  counter("comb_popped_messages_total", "Messages delivered by pop replies."),
		poppedBytes: counter("comb_popped_bytes_total", "Data bytes of the messages delivered by pop replies."),
		redelivered: counter("comb_redelivered_messages_total", "Delivered messages that had been delivered before (attempt > 1): after an expired lease, a retry or a failed ack."),
		acked:       counter("comb_acked_messages_total", "Messages completed by acks (a cumulative ack counts every message it settled)."),
		retried:     counter("comb_retried_messages_total", "Messages made deliverable again by retry and failed acks."),
		deadMsgs:    counter("comb_dead_lettered_messages_total", "Messages given up by dead and failed acks: into the dead letters, or dropped by a queue that keeps none."),
		deadBytes:   counter("comb_dead_lettered_bytes_total", "Data bytes of the messages kept in the dead letters."),
		ackRefused:  counter("comb_acks_refused_total", "Acks that settled nothing: an expired or foreign lease, an unknown partition, an offset outside the lease."),

		requestDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "comb_request_duration_seconds",
			Help:    "Requests from their admission to their reply, by verb (pop_waited: pops that long-polled).",
			Buckets: latencyBuckets,
		}, []string{"tenant", "verb"}),
		commitDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "comb_commit_duration_seconds",
			Help:    "PostgreSQL store calls: one push or ack transaction with every request it coalesced, or one try of a pop.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
		txMessages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "comb_transaction_messages",
			Help:    "Messages per PostgreSQL transaction: pushed (push), acks (ack), leased by a pop that found some (pop).",
			Buckets: countBuckets,
		}, []string{"op"}),
	}
	m.commitPush, m.commitAck, m.commitPop = m.commitDur.WithLabelValues("push"), m.commitDur.WithLabelValues("ack"), m.commitDur.WithLabelValues("pop")
	m.txPush, m.txAck, m.txPop = m.txMessages.WithLabelValues("push"), m.txMessages.WithLabelValues("ack"), m.txMessages.WithLabelValues("pop")
	m.figs.m = m
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.pushedMsgs, m.pushedBytes, m.duplicates, m.poppedMsgs, m.poppedBytes, m.redelivered,
		m.acked, m.retried, m.deadMsgs, m.deadBytes, m.ackRefused,
		m.requestDur, m.commitDur, m.txMessages,
		&scrapeCollector{m: m},
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// WatchBridge makes the metrics report stats (a bridge's Stats) on
// scrape: requests in flight, pops waiting, overloads and errors. Call it
// before the first scrape.
func (m *Metrics) WatchBridge(stats func() bridge.Stats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bridgeStats = stats
}

// WatchSpool makes the metrics report stats (a bridge's SpoolStats) on
// scrape: the spool's bytes, records, oldest record and drained messages.
// Nothing is reported while stats says there is no spool.
func (m *Metrics) WatchSpool(stats func() (spool.Stats, bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spoolStats = stats
}

// series returns the counters of q's queue label, admitting q while there
// is room.
func (m *Metrics) series(q domain.QueueRef) *queueSeries {
	m.mu.RLock()
	s := m.queues[q]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seriesLocked(q)
}

func (m *Metrics) seriesLocked(q domain.QueueRef) *queueSeries {
	if s := m.queues[q]; s != nil {
		return s
	}
	label := q.Name
	if m.nQueues >= m.opts.MaxQueues {
		label = Other
	}
	key := domain.QueueRef{Tenant: q.Tenant, Name: label}
	s := m.queues[key] // the tenant's Other series, once made
	if s == nil {
		s = m.newSeries(q.Tenant, label)
	}
	if label != Other {
		m.nQueues++
	}
	m.queues[q] = s
	m.queues[key] = s
	return s
}

func (m *Metrics) newSeries(tenant, label string) *queueSeries {
	lv := []string{tenant, label}
	return &queueSeries{
		label:       label,
		pushedMsgs:  m.pushedMsgs.WithLabelValues(lv...),
		pushedBytes: m.pushedBytes.WithLabelValues(lv...),
		duplicates:  m.duplicates.WithLabelValues(lv...),
		poppedMsgs:  m.poppedMsgs.WithLabelValues(lv...),
		poppedBytes: m.poppedBytes.WithLabelValues(lv...),
		redelivered: m.redelivered.WithLabelValues(lv...),
		acked:       m.acked.WithLabelValues(lv...),
		retried:     m.retried.WithLabelValues(lv...),
		deadMsgs:    m.deadMsgs.WithLabelValues(lv...),
		deadBytes:   m.deadBytes.WithLabelValues(lv...),
		ackRefused:  m.ackRefused.WithLabelValues(lv...),
	}
}

// groupLabel returns the queue and group labels of a group, admitting it
// while there is room. The lock must be held.
func (m *Metrics) groupLabelLocked(q domain.QueueRef, group string) (string, string) {
	s := m.seriesLocked(q)
	if s.label == Other {
		return Other, Other
	}
	k := groupRef{q, group}
	if g, ok := m.groups[k]; ok {
		return s.label, g
	}
	g := group
	if m.nGroups >= m.opts.MaxQueues {
		g = Other
	} else {
		m.nGroups++
	}
	m.groups[k] = g
	return s.label, g
}

// PushTx implements bridge.Observer.
func (m *Metrics) PushTx(d time.Duration, reqs []domain.PushParams, outs []domain.PushOutcome) {
	m.commitPush.Observe(d.Seconds())
	n := 0
	for i := range reqs {
		n += len(reqs[i].Messages)
		if i >= len(outs) || outs[i].Err != nil {
			continue
		}
		var stored, bytes, dups int
		msgs := reqs[i].Messages
		for k, r := range outs[i].Results {
			if r.Status == domain.Stored {
				stored++
				if k < len(msgs) {
					bytes += len(msgs[k].Data)
				}
			} else {
				dups++
			}
		}
		s := m.series(reqs[i].Queue)
		s.pushedMsgs.Add(float64(stored))
		s.pushedBytes.Add(float64(bytes))
		if dups > 0 {
			s.duplicates.Add(float64(dups))
		}
	}
	m.txPush.Observe(float64(n))
}

// AckTx implements bridge.Observer.
func (m *Metrics) AckTx(d time.Duration, reqs []domain.AckParams, outs []domain.AckOutcome) {
	m.commitAck.Observe(d.Seconds())
	n := 0
	for i := range reqs {
		n += len(reqs[i].Acks)
		if i >= len(outs) || outs[i].Err != nil {
			continue
		}
		var settled, retried, dead, deadBytes, refused int64
		for _, r := range outs[i].Results {
			if !r.OK {
				refused++
				continue
			}
			settled += r.Settled
			retried += r.Retried
			if r.Dead {
				dead++
				deadBytes += r.DeadBytes
			}
		}
		s := m.series(reqs[i].Queue)
		s.acked.Add(float64(settled))
		if retried > 0 {
			s.retried.Add(float64(retried))
		}
		if dead > 0 {
			s.deadMsgs.Add(float64(dead))
			s.deadBytes.Add(float64(deadBytes))
		}
		if refused > 0 {
			s.ackRefused.Add(float64(refused))
		}
	}
	m.txAck.Observe(float64(n))
}

// PopTx implements bridge.Observer.
func (m *Metrics) PopTx(d time.Duration, _ domain.QueueRef, n int) {
	m.commitPop.Observe(d.Seconds())
	if n > 0 {
		m.txPop.Observe(float64(n))
	}
}

// Popped implements bridge.Observer.
func (m *Metrics) Popped(q domain.QueueRef, msgs []domain.Message) {
	var bytes, again int
	for i := range msgs {
		bytes += len(msgs[i].Data)
		if msgs[i].Attempt > 1 {
			again++
		}
	}
	s := m.series(q)
	s.poppedMsgs.Add(float64(len(msgs)))
	s.poppedBytes.Add(float64(bytes))
	if again > 0 {
		s.redelivered.Add(float64(again))
	}
}

// Answered implements bridge.Observer.
func (m *Metrics) Answered(tenant, verb string, waited bool, d time.Duration) {
	if waited {
		verb = "pop_waited"
	}
	k := reqKey{tenant, verb}
	o, ok := m.requestObs.Load(k)
	if !ok {
		o, _ = m.requestObs.LoadOrStore(k, m.requestDur.WithLabelValues(tenant, verb))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// figuresCache holds the last read of the store's group figures.
type figuresCache struct {
	m    *Metrics
	mu   sync.Mutex // held while reading: concurrent scrapes wait for one read
	at   time.Time
	rows []store.GroupFigures
	err  error
}

func (c *figuresCache) get() ([]store.GroupFigures, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.m.opts.CacheFor {
		return c.rows, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.m.opts.Timeout)
	defer cancel()
	c.rows, c.err = c.m.opts.Store.GroupFigures(ctx, store.GroupFiguresParams{})
	c.at = time.Now()
	if c.err != nil {
		c.m.log.Warn("metrics: read group figures", "err", c.err)
	}
	return c.rows, c.err
}
