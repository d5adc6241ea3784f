// Package bridge owns Comb's NATS side: the micro service "comb", one
// endpoint per verb, request decoding and validation, and the coalescers
// that turn many concurrent requests into few PostgreSQL transactions.
//
// Micro handlers run one at a time per endpoint subscription, so a handler
// only decodes and validates its request, then hands it to a bounded set of
// workers and returns; a worker replies once the store call has returned
// (for pushes: once the transaction has committed). When a bound is
// reached the request is refused at once with a 429 instead of queueing
// without limit.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/spool"
	"github.com/combmq/comb/store"
)

// ServiceVersion is the micro service's version; its name is
// protocol.ServiceName.
const ServiceVersion = "0.1.0"

// DefaultQueueGroup is the NATS queue group of every endpoint unless
// Config.QueueGroup names another.
const DefaultQueueGroup = "comb"

// Config tunes a Bridge. The zero value is usable: every zero field takes
// the default named in its comment.
type Config struct {
	// Prefix is the first subject token(s); "" means protocol.DefaultPrefix.
	Prefix string
	// QueueGroup is the NATS queue group of every endpoint, so that several
	// bridges share the requests; "" means DefaultQueueGroup.
	QueueGroup string

	// DecodeWorkers decode pushes, puts and acks off their endpoints'
	// subscriptions (see intake.go); 0 means runtime.GOMAXPROCS.
	DecodeWorkers int
	// PushWorkers run push and put transactions; 0 means 4.
	PushWorkers int
	// PushQueue is how many push and put requests may wait for a worker;
	// 0 means 4096.
	PushQueue int
	// BatchMessages and BatchBytes cap how much one push transaction
	// coalesces; 0 means 10000 messages and protocol.MaxRequestBytes (a
	// batch holds at least one largest request). A worker stops taking
	// requests once either is reached.
	BatchMessages int
	BatchBytes    int
	// PendingBytes caps the request bytes of pushes and puts taken but not
	// yet answered; 0 means 64 MiB.
	PendingBytes int

	// AckWorkers run ack transactions; 0 means 2. AckQueue is how many ack
	// requests may wait; 0 means 4096. BatchAcks caps the acks one
	// transaction coalesces; 0 means 10000.
	AckWorkers int
	AckQueue   int
	BatchAcks  int

	// PopWorkers bounds concurrent store pops; 0 means 8.
	PopWorkers int
	// MaxPops bounds the pops the bridge holds at once: waiting for a
	// worker, running, or long-polling; 0 means 10000.
	MaxPops int
	// RetryInterval is how often a long-polling pop tries again without a
	// wake-up, a safety net for a missed wake and for expired leases; 0
	// means 1 s.
	RetryInterval time.Duration

	// AdminWorkers run renew, configure, info, list, delete, dlq and txn; 0
	// means 4. AdminQueue is how many may wait; 0 means 1024.
	AdminWorkers int
	AdminQueue   int

	// MaxMessageBytes and MaxRequestBytes are the bridge's hard caps on a
	// message and a request body; 0 means protocol.MaxMessageBytes and
	// protocol.MaxRequestBytes. A queue's own
	// max_message_bytes applies within them.
	MaxMessageBytes int
	MaxRequestBytes int

	// SubPendingMsgs and SubPendingBytes bound the requests the NATS client
	// buffers per endpoint before a handler takes them; 0 means 65536 and
	// 64 MiB.
	SubPendingMsgs  int
	SubPendingBytes int

	// RequestTimeout bounds each store call; 0 means 30 s.
	RequestTimeout time.Duration
	// StopTimeout bounds how long Stop waits for requests in flight before
	// it cancels them; 0 means 10 s.
	StopTimeout time.Duration

	// Quotas limit what each tenant may use; the zero value limits
	// nothing. QuotaRefresh is how often the tenants' retained bytes are
	// read for Quota.MaxBytes; 0 means DefaultQuotaRefresh.
	Quotas       Quotas
	QuotaRefresh time.Duration

	// Observer receives the bridge's figures for metrics; nil observes
	// nothing.
	Observer Observer

	// Spool, when set, takes the pushes PostgreSQL cannot (see spool.go);
	// nil: such pushes answer 503. The bridge drains it but does not own
	// it: the caller closes it after Stop.
	Spool *spool.Spool
	// Maintenance starts the bridge in maintenance mode (SetMaintenance).
	Maintenance bool
	// DrainBatchMessages caps the messages one drain transaction stores;
	// 0 means BatchMessages.
	DrainBatchMessages int
}

// WithDefaults returns c with every zero field set to the default its
// comment names: what New runs with.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Prefix == "" {
		c.Prefix = protocol.DefaultPrefix
	}
	if c.QueueGroup == "" {
		c.QueueGroup = DefaultQueueGroup
	}
	def(&c.DecodeWorkers, runtime.GOMAXPROCS(0))
	def(&c.PushWorkers, 4)
	def(&c.PushQueue, 4096)
	def(&c.BatchMessages, 10000)
	def(&c.BatchBytes, protocol.MaxRequestBytes)
	def(&c.PendingBytes, 64<<20)
	def(&c.AckWorkers, 2)
	def(&c.AckQueue, 4096)
	def(&c.BatchAcks, 10000)
	def(&c.DrainBatchMessages, c.BatchMessages)
	def(&c.PopWorkers, 8)
	def(&c.MaxPops, 10000)
	defDur(&c.RetryInterval, time.Second)
	def(&c.AdminWorkers, 4)
	def(&c.AdminQueue, 1024)
	def(&c.MaxMessageBytes, protocol.MaxMessageBytes)
	def(&c.MaxRequestBytes, protocol.MaxRequestBytes)
	def(&c.SubPendingMsgs, 65536)
	def(&c.SubPendingBytes, 64<<20)
	defDur(&c.RequestTimeout, 30*time.Second)
	defDur(&c.StopTimeout, 10*time.Second)
	defDur(&c.QuotaRefresh, DefaultQuotaRefresh)
	return c
}

// Validate reports every problem of a configuration (after WithDefaults)
// at once, naming each field by its configuration key (push_workers is
// PushWorkers), as `comb serve` spells it in files and, with dashes, in
// flags.
func (c Config) Validate() error {
	var errs []error
	if err := c.Quotas.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := protocol.ValidateQueue(c.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("prefix %q: must be dot-separated tokens of A-Z a-z 0-9 _ -", c.Prefix))
	}
	if err := protocol.ValidateQueue(c.QueueGroup); err != nil {
		errs = append(errs, fmt.Errorf("queue_group %q: must be dot-separated tokens of A-Z a-z 0-9 _ -", c.QueueGroup))
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"decode_workers", c.DecodeWorkers}, {"push_workers", c.PushWorkers}, {"push_queue", c.PushQueue}, {"batch_messages", c.BatchMessages},
		{"batch_bytes", c.BatchBytes}, {"pending_bytes", c.PendingBytes}, {"ack_workers", c.AckWorkers},
		{"ack_queue", c.AckQueue}, {"batch_acks", c.BatchAcks}, {"pop_workers", c.PopWorkers},
		{"max_pops", c.MaxPops}, {"admin_workers", c.AdminWorkers}, {"admin_queue", c.AdminQueue},
		{"max_message_bytes", c.MaxMessageBytes}, {"max_request_bytes", c.MaxRequestBytes},
		{"sub_pending_msgs", c.SubPendingMsgs}, {"sub_pending_bytes", c.SubPendingBytes},
		{"spool_drain_batch", c.DrainBatchMessages},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative", f.name, f.v))
		}
	}
	if c.PendingBytes < c.MaxRequestBytes {
		errs = append(errs, fmt.Errorf("pending_bytes %d: must be at least max_request_bytes %d", c.PendingBytes, c.MaxRequestBytes))
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"retry_interval", c.RetryInterval}, {"request_timeout", c.RequestTimeout}, {"stop_timeout", c.StopTimeout}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must not be negative", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// Bridge serves the Comb protocol on NATS connections, one per tenant.
type Bridge struct {
	nc      *nats.Conn // the bridge's own: wake-ups between bridges
	tenants []*tenant
	st      *store.Store
	cfg     Config
	log     *slog.Logger
	lim     wire.Limits
	obs     Observer // nil: none

	wakePrefix       string // "_COMB.<prefix>.wake."
	tenantWakePrefix string // "_COMB.<prefix>.twake."

	mu       sync.Mutex
	started  bool
	aborted  bool // a Start failed; the bridge cannot start again
	wakeSubs []*nats.Subscription

	ctx    context.Context // store calls; cancelled by Stop after its timeout
	cancel context.CancelFunc
	quit   chan struct{} // closed when workers must exit
	wg     sync.WaitGroup
	track  tracker

	pushTx, ackTx atomic.Int64 // store calls of the coalescers

	maintenance  atomic.Bool   // SetMaintenance
	pgDown       atomic.Bool   // a push found PostgreSQL unavailable; the drainer clears it
	drainKick    chan struct{} // the mode changed: the drainer looks again
	spooledMsgs  atomic.Int64  // messages answered "spooled"
	drainDropped atomic.Int64  // spooled messages the store refused at the drain

	// pushCh takes the pushes of several partitions, pushShards[i] those
	// of one partition that hash to push worker i (see pushShard);
	// pushQueued counts the jobs in all of them against Config.PushQueue.
	pushCh     chan *pushJob
	pushShards []chan *pushJob
	pushQueued atomic.Int64
	pushBytes  atomic.Int64
	ackCh      chan *ackJob
	adminCh    chan func()
	intake     *intake
	pops       *popper
	stopOnce   sync.Once
	stopDone   chan struct{}
}

// Tenant is one NATS account the bridge serves: the requests that arrive
// on Conn are Name's, whatever they say, and their replies leave on it.
type Tenant struct {
	Name string
	Conn *nats.Conn
	// Interest, when set, says whether anyone in the tenant's account
	// still subscribes to a subject; a long-polling pop whose requester
	// is gone is then dropped before it leases anything.
	Interest func(subject string) bool
}

// tenant is a served Tenant: its micro service and its figures.
type tenant struct {
	name     string
	nc       *nats.Conn
	svc      micro.Service
	stats    map[string]*endpointStats
	waiting  atomic.Int64 // its pops long-polling on this bridge
	quota    *quota
	interest func(subject string) bool // nil: assume someone listens
}

// endpointStats are the bridge's own figures of one endpoint of one
// tenant, reported in the "data" of `nats micro stats`. The micro
// framework counts errors only when a handler answers before it returns;
// these count the answers the workers send later.
type endpointStats struct {
	asyncErrors atomic.Int64
	overloaded  atomic.Int64
	inFlight    atomic.Int64
	syncErrors  atomic.Int64 // answered by the handler (micro counts these too)
	// answered and answerNanos time the requests a worker answered, from
	// their admission to their reply: micro's processing time stops when
	// the handler hands a request to a worker.
	answered    atomic.Int64
	answerNanos atomic.Int64
}

// statsData is one endpoint's "data" in the micro stats.
type statsData struct {
	// Answered, RequestTime and AverageRequestTime time the requests the
	// workers answered from admission to reply, in nanoseconds like
	// micro's processing_time: the real latency, which micro's figures
	// (the hand-off to a worker) are not.
	Answered           int64         `json:"answered"`
	RequestTime        time.Duration `json:"request_time"`
	AverageRequestTime time.Duration `json:"average_request_time"`
	InFlight           int64         `json:"in_flight"`
	AsyncErrors        int64         `json:"async_errors"`
	Overloaded         int64         `json:"overloaded"`
	Transactions       *int64        `json:"transactions,omitempty"`
	Waiting            *int          `json:"waiting,omitempty"`
	// Maintenance and Spool are the broker's state, on the push endpoint
	// of the global account only (an operator's view, as on /readyz);
	// Spool is absent without a spool.
	Maintenance *bool                `json:"maintenance,omitempty"`
	Spool       *protocol.SpoolState `json:"spool,omitempty"`
}

// New returns a bridge serving st. nc is the bridge's own connection, for
// the wake-ups between bridges; it serves the global tenant too unless
// tenants are given, each on a connection into its own NATS account.
// Start it with Start. Set the connections' closed and error handlers
// before Start: the micro framework relies on them, and handlers set
// later replace its own.
func New(nc *nats.Conn, st *store.Store, cfg Config, log *slog.Logger, tenants ...Tenant) (*Bridge, error) {
	if nc == nil || st == nil {
		return nil, errors.New("bridge: nil connection or store")
	}
	if len(tenants) == 0 {
		tenants = []Tenant{{Name: "", Conn: nc}}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bridge: config: %w", err)
	}
	b := &Bridge{
		nc:               nc,
		st:               st,
		cfg:              cfg,
		log:              log,
		lim:              wire.Limits{MaxMessageBytes: cfg.MaxMessageBytes, MaxRequestBytes: cfg.MaxRequestBytes},
		obs:              cfg.Observer,
		wakePrefix:       protocol.InternalPrefix + "." + cfg.Prefix + ".wake.",
		tenantWakePrefix: protocol.InternalPrefix + "." + cfg.Prefix + ".twake.",
		quit:             make(chan struct{}),
		stopDone:         make(chan struct{}),
		pushCh:           make(chan *pushJob, cfg.PushQueue),
		ackCh:            make(chan *ackJob, cfg.AckQueue),
		adminCh:          make(chan func(), cfg.AdminQueue),
		drainKick:        make(chan struct{}, 1),
	}
	b.intake = newIntake(cfg.DecodeWorkers, b.quit)
	for range cfg.PushWorkers {
		b.pushShards = append(b.pushShards, make(chan *pushJob, cfg.PushQueue))
	}
	b.maintenance.Store(cfg.Maintenance)
	seen := map[string]bool{}
	for _, t := range tenants {
		if t.Conn == nil || seen[t.Name] {
			return nil, fmt.Errorf("bridge: tenant %q: nil or repeated", t.Name)
		}
		seen[t.Name] = true
		tt := &tenant{name: t.Name, nc: t.Conn, stats: map[string]*endpointStats{}, quota: newQuota(cfg.Quotas.Of(t.Name)),
			interest: t.Interest}
		for _, v := range protocol.Verbs {
			tt.stats[v] = &endpointStats{}
		}
		b.tenants = append(b.tenants, tt)
	}
	b.track.idle = make(chan struct{})
	b.pops = newPopper(b)
	return b, nil
}

// Start registers the micro service and its endpoints, and starts the
// workers. ctx bounds only the start: the bridge runs until Stop.
func (b *Bridge) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started || b.aborted {
		return errors.New("bridge: already started")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bridge: start: %w", err)
	}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))

	onWake := func(m *nats.Msg) {
		q, ok := b.wakeQueue(m.Subject)
		if !ok {
			return
		}
		if group, ok := decodeReread(m.Data); ok {
			b.st.Reread(q, group)
		}
		targets, count := decodeWake(m.Data)
		b.pops.wake(q, targets, count)
	}
	for _, prefix := range []string{b.wakePrefix, b.tenantWakePrefix} {
		sub, err := b.nc.Subscribe(prefix+">", onWake)
		if err != nil {
			b.unsubscribeWakes()
			b.cancel()
			return fmt.Errorf("bridge: subscribe to wake-ups: %w", err)
		}
		b.wakeSubs = append(b.wakeSubs, sub)
	}

	for range b.cfg.DecodeWorkers {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.intake.decoder()
		}()
	}
	for i := range b.cfg.PushWorkers {
		b.wg.Add(1)
		go b.pushWorker(b.pushShards[i])
	}
	for range b.cfg.AckWorkers {
		b.wg.Add(1)
		go b.ackWorker()
	}
	for range b.cfg.PopWorkers {
		b.wg.Add(1)
		go b.pops.worker()
	}
	b.wg.Add(1)
	go b.pops.checker()
	for range b.cfg.AdminWorkers {
		b.wg.Add(1)
		go b.adminWorker()
	}
	if b.cfg.Spool != nil {
		b.wg.Add(1)
		go b.drainer()
	}
	if b.hasByteQuotas() {
		// Start from what PostgreSQL holds, not from nothing.
		rctx, cancel := b.storeCtx()
		if err := b.refreshUsage(rctx); err != nil {
			b.log.Warn("read tenant usage", "err", err)
		}
		cancel()
		b.wg.Add(1)
		go b.usageRefresher()
	}

	for _, t := range b.tenants {
		if err := b.serve(ctx, t); err != nil {
			b.stopServices()
			b.abortStart()
			return err
		}
	}
	b.started = true
	for _, t := range b.tenants {
		b.log.Info("bridge started", "tenant", t.name, "prefix", b.cfg.Prefix, "queue_group", b.cfg.QueueGroup, "service_id", t.svc.Info().ID)
	}
	return nil
}

// serve registers t's micro service and endpoints on its connection, and
// returns once the server has the subscriptions, so that a request sent
// right after Start finds a responder.
func (b *Bridge) serve(ctx context.Context, t *tenant) error {
	svc, err := micro.AddService(t.nc, micro.Config{
		Name:         protocol.ServiceName,
		Version:      ServiceVersion,
		Description:  "Comb: a partitioned message queue persisted in PostgreSQL",
		Metadata:     map[string]string{"prefix": b.cfg.Prefix},
		QueueGroup:   b.cfg.QueueGroup,
		StatsHandler: func(e *micro.Endpoint) any { return b.statsOf(t, e.Name) },
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			b.log.Error("nats service error", "tenant", t.name, "subject", err.Subject, "err", err.Description)
		},
	})
	if err != nil {
		return fmt.Errorf("bridge: add service: %w", err)
	}
	t.svc = svc
	// Pushes, puts and acks are decoded by the intake's workers (see
	// intake.go); pushes and puts then go on in the order they came.
	staged := func(prepare stagedHandler, ordered bool) func(*tenant, micro.Request) {
		st := b.intake.newStage(prepare, ordered)
		if ordered {
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				st.sequence()
			}()
		}
		return st.handle
	}
	handlers := map[string]func(*tenant, micro.Request){
		protocol.VerbPush: staged(b.preparePush, true), protocol.VerbPut: staged(b.preparePut, true), protocol.VerbPop: b.handlePop,
		protocol.VerbAck: staged(b.prepareAck, false), protocol.VerbRenew: b.handleRenew, protocol.VerbConfigure: b.handleConfigure,
		protocol.VerbInfo: b.handleInfo, protocol.VerbList: b.handleList, protocol.VerbDelete: b.handleDelete,
		protocol.VerbDLQ: b.handleDLQ, protocol.VerbSeek: b.handleSeek, protocol.VerbGroups: b.handleGroups,
		protocol.VerbPeek: b.handlePeek, protocol.VerbTxn: b.handleTxn, protocol.VerbNamespacePop: b.handleNamespacePop,
	}
	for _, verb := range protocol.Verbs {
		subject := b.cfg.Prefix + "." + verb + ".>"
		if !protocol.TakesQueue(verb) {
			subject = b.cfg.Prefix + "." + verb
		}
		h := handlers[verb]
		if verb != protocol.VerbPush && verb != protocol.VerbPut {
			// In maintenance only pushes are taken (into the spool):
			// nothing else may read PostgreSQL.
			serve := h
			h = func(t *tenant, req micro.Request) {
				if b.maintenance.Load() {
					b.fail(t, req, errMaintenance)
					return
				}
				serve(t, req)
			}
		}
		err := svc.AddEndpoint(verb, micro.HandlerFunc(func(req micro.Request) { h(t, req) }),
			micro.WithEndpointSubject(subject),
			micro.WithEndpointMetadata(map[string]string{"description": descriptions[verb]}),
			micro.WithEndpointPendingLimits(b.cfg.SubPendingMsgs, b.cfg.SubPendingBytes))
		if err != nil {
			return fmt.Errorf("bridge: add endpoint %s: %w", verb, err)
		}
	}
	if t.name == "" {
		// The operator's verb: in the global account only, never a
		// tenant's.
		err := svc.AddEndpoint(protocol.VerbMaintenance, micro.HandlerFunc(b.handleMaintenance),
			micro.WithEndpointSubject(b.cfg.Prefix+"."+protocol.VerbMaintenance),
			micro.WithEndpointMetadata(map[string]string{"description": "turn maintenance mode on or off: spool every push, pause the rest"}))
		if err != nil {
			return fmt.Errorf("bridge: add endpoint %s: %w", protocol.VerbMaintenance, err)
		}
	}
	flushTimeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		flushTimeout = time.Until(d)
	}
	if err := t.nc.FlushTimeout(flushTimeout); err != nil {
		return fmt.Errorf("bridge: flush subscriptions: %w", err)
	}
	return nil
}

// stopServices stops the tenants' micro services that were added.
func (b *Bridge) stopServices() {
	for _, t := range b.tenants {
		if t.svc == nil {
			continue
		}
		if err := t.svc.Stop(); err != nil {
			b.log.Warn("stop micro service", "tenant", t.name, "err", err)
		}
	}
}

func (b *Bridge) unsubscribeWakes() {
	for _, s := range b.wakeSubs {
		if err := s.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			b.log.Warn("unsubscribe wake-ups", "err", err)
		}
	}
	b.wakeSubs = nil
}

// abortStart undoes a Start that failed half way.
func (b *Bridge) abortStart() {
	b.aborted = true
	b.unsubscribeWakes()
	b.cancel()
	close(b.quit)
	b.wg.Wait()
}

var descriptions = map[string]string{
	protocol.VerbPush:      "append a batch of messages",
	protocol.VerbPut:       "append one message: the body is the message",
	protocol.VerbPop:       "lease the next messages for a consumer group",
	protocol.VerbAck:       "settle leased messages",
	protocol.VerbRenew:     "extend leases",
	protocol.VerbConfigure: "create a queue or change some of its settings",
	protocol.VerbInfo:      "settings and live figures of one queue",
	protocol.VerbList:      "every queue, one line of figures each",
	protocol.VerbDelete:    "delete a queue and all its data",
	protocol.VerbDLQ:       "list, replay or purge dead letters",
	protocol.VerbSeek:      "move a consumer group's cursors to the start, the end or a time",
	protocol.VerbGroups:    "list a queue's consumer groups with their lag, or delete one",
	protocol.VerbPeek:      "read a partition's messages by offset or producer id, leasing nothing",
	protocol.VerbTxn:       "settle acks and push messages, across queues, in one transaction: all or nothing",

	// A namespace pop, apart: its longer name would realign the lines above.
	protocol.VerbNamespacePop: "lease the next messages of every queue under a namespace",
}

// statsOf is the "data" of t's endpoint verb in the micro stats: t's own
// figures, and the bridge's transactions (shared by every tenant's
// requests, and telling nothing of any one's).
func (b *Bridge) statsOf(t *tenant, verb string) any {
	s := t.stats[verb]
	if s == nil {
		return nil
	}
	d := statsData{InFlight: s.inFlight.Load(), AsyncErrors: s.asyncErrors.Load(), Overloaded: s.overloaded.Load()}
	d.Answered, d.RequestTime = s.answered.Load(), time.Duration(s.answerNanos.Load())
	if d.Answered > 0 {
		d.AverageRequestTime = d.RequestTime / time.Duration(d.Answered)
	}
	switch verb {
	case protocol.VerbPop:
		n := int(t.waiting.Load())
		d.Waiting = &n
	case protocol.VerbPush: // includes puts: they share the coalescer
		n := b.pushTx.Load()
		d.Transactions = &n
		if t.name == "" {
			m := b.Maintenance()
			d.Maintenance, d.Spool = &m, b.SpoolState()
		}
	case protocol.VerbAck:
		n := b.ackTx.Load()
		d.Transactions = &n
	}
	return d
}

// Stop drains: it stops taking requests, answers those in flight, then
// returns. Long-polling pops try once more and answer at once. Requests
// still unanswered after StopTimeout have their store calls cancelled. It
// is safe to call twice, and from several goroutines.
func (b *Bridge) Stop() {
	b.stopOnce.Do(func() {
		defer close(b.stopDone)
		b.stop()
	})
	<-b.stopDone
}

func (b *Bridge) stop() {
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if !started {
		return
	}
	// No new requests: the endpoints' subscriptions drain.
	b.stopServices()
	// Requests NATS already delivered to a connection still reach the
	// handlers. After a flush the server has processed the unsubscriptions,
	// so every such request is queued locally; a barrier runs after each
	// subscription has handed its queue to the handlers.
	deadline := time.Now().Add(b.cfg.StopTimeout)
	for _, t := range b.tenants {
		if t.nc.IsClosed() {
			continue
		}
		if err := t.nc.FlushTimeout(time.Until(deadline)); err != nil {
			b.log.Warn("stop: flush", "tenant", t.name, "err", err)
		}
		done := make(chan struct{})
		if err := t.nc.Barrier(func() { close(done) }); err == nil {
			select {
			case <-done:
			case <-time.After(time.Until(deadline)):
				b.log.Warn("stop: handlers still busy at the deadline", "tenant", t.name)
			}
		}
	}
	// The requests the handlers took reach their workers.
	if !b.intake.wait(deadline) {
		b.log.Warn("stop: requests still being decoded at the deadline")
	}
	idle := b.track.close()
	b.pops.stop()
	select {
	case <-idle:
	case <-time.After(time.Until(deadline)):
		b.log.Warn("stop: requests still in flight at the deadline; cancelling them", "in_flight", b.track.count())
		b.cancel()
		select {
		case <-idle:
		case <-time.After(2 * time.Second):
			b.log.Error("stop: requests never answered", "in_flight", b.track.count())
		}
	}
	b.cancel()
	close(b.quit)
	b.wg.Wait()
	b.pops.stopTimers()
	b.unsubscribeWakes()
	b.log.Info("bridge stopped")
}

// tracker counts requests taken and not yet answered, so Stop can wait for
// them, and refuses new ones once Stop has begun waiting.
type tracker struct {
	mu      sync.Mutex
	n       int
	closing bool
	idle    chan struct{}
}

func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.closing {
		close(t.idle)
	}
}

func (t *tracker) close() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closing {
		t.closing = true
		if t.n == 0 {
			close(t.idle)
		}
	}
	return t.idle
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// call is one request taken by a handler and answered by a worker. The
// worker must not touch the micro.Request: the framework reads it after
// the handler returns, so the worker publishes to the reply subject itself.
type call struct {
	t       *tenant
	verb    string
	subject string
	reply   string
	stats   *endpointStats
	start   time.Time // admitted
	waited  bool      // a pop that long-polled
}

// admit registers a request of t that a worker will answer. It answers and
// returns false when the bridge is stopping.
func (b *Bridge) admit(t *tenant, req micro.Request, verb string) (*call, bool) {
	if !b.track.add() {
		b.fail(t, req, protocol.Errorf(protocol.CodeUnavailable, "bridge stopping, retry"))
		return nil, false
	}
	s := t.stats[verb]
	s.inFlight.Add(1)
	return &call{t: t, verb: verb, subject: req.Subject(), reply: req.Reply(), stats: s, start: time.Now()}, true
}

// finish marks c answered.
func (b *Bridge) finish(c *call) {
	d := time.Since(c.start)
	c.stats.answered.Add(1)
	c.stats.answerNanos.Add(int64(d))
	if b.obs != nil {
		b.obs.Answered(c.t.name, c.verb, c.waited, d)
	}
	c.stats.inFlight.Add(-1)
	b.track.done()
}

// overloaded answers a request that found its bound reached.
func (b *Bridge) overloaded(req micro.Request, c *call) {
	c.stats.overloaded.Add(1)
	b.finish(c)
	b.fail(c.t, req, protocol.Errorf(protocol.CodeTooMany, "overloaded, retry later"))
}

// respond sends a worker's reply.
func (b *Bridge) respond(c *call, data []byte) {
	if c.reply == "" {
		return // a publish without a reply subject wants no answer
	}
	if err := c.t.nc.Publish(c.reply, data); err != nil {
		b.log.Warn("reply failed", "subject", c.subject, "bytes", len(data), "err", err)
	}
}

// respondError sends a worker's error reply with the micro framework's
// error headers, as req.Error would.
func (b *Bridge) respondError(c *call, err error) {
	c.stats.asyncErrors.Add(1)
	code, msg := b.errorOf(c.subject, err)
	if c.reply == "" {
		return
	}
	retry := retryAfterMS(err)
	h := nats.Header{
		micro.ErrorHeader:     []string{headerSafe(msg)},
		micro.ErrorCodeHeader: []string{strconv.Itoa(code)},
	}
	if retry > 0 {
		h.Set(protocol.HeaderRetryAfterMS, strconv.FormatInt(retry, 10))
	}
	m := &nats.Msg{Subject: c.reply, Header: h, Data: wire.ErrorBody(code, msg, retry)}
	if err := c.t.nc.PublishMsg(m); err != nil {
		b.log.Warn("error reply failed", "subject", c.subject, "err", err)
	}
}

// fail answers a request of t from its handler with an error.
func (b *Bridge) fail(t *tenant, req micro.Request, err error) {
	if s := t.endpointOf(b.cfg.Prefix, req.Subject()); s != nil {
		if _, ok := req.(*detached); ok {
			s.asyncErrors.Add(1) // micro does not see this answer
		} else {
			s.syncErrors.Add(1)
		}
	}
	code, msg := b.errorOf(req.Subject(), err)
	if req.Reply() == "" {
		return
	}
	retry := retryAfterMS(err)
	var opts []micro.RespondOpt
	if retry > 0 {
		opts = append(opts, micro.WithHeaders(micro.Headers{protocol.HeaderRetryAfterMS: []string{strconv.FormatInt(retry, 10)}}))
	}
	if rerr := req.Error(strconv.Itoa(code), headerSafe(msg), wire.ErrorBody(code, msg, retry), opts...); rerr != nil {
		b.log.Warn("error reply failed", "subject", req.Subject(), "err", rerr)
	}
}

// retryAfterMS is when err says the same request may succeed, in whole
// milliseconds rounded up, or 0.
func retryAfterMS(err error) int64 {
	if we, ok := protocol.AsError(err); ok && we.RetryAfterMS > 0 {
		return we.RetryAfterMS
	}
	if d, ok := domain.RetryAfterOf(err); ok && d > 0 {
		return int64((d + time.Millisecond - 1) / time.Millisecond)
	}
	return 0
}

// errorOf maps an error to its wire code and message. PostgreSQL being
// unavailable, and anything that is not a protocol error or a store
// sentinel (a bug), is answered with a generic message and a request id,
// and logged in full under that id, so that a client's report finds the
// log line and the reply names no host, user or URL.
func (b *Bridge) errorOf(subject string, err error) (int, string) {
	if we, ok := protocol.AsError(err); ok {
		return we.Code, we.Message
	}
	if errors.Is(err, context.DeadlineExceeded) && (b.ctx == nil || b.ctx.Err() == nil) {
		// The store call outlived request_timeout: PostgreSQL may be
		// slow, or the request big (a seek of a million partitions to a
		// time). pgx reports the cancelled query as a network error,
		// which would read as PostgreSQL unavailable.
		id := nuid.Next()
		b.log.Warn("request timed out", "request_id", id, "subject", subject, "request_timeout", b.cfg.RequestTimeout, "err", err)
		return protocol.CodeUnavailable, "timed out waiting for PostgreSQL after " + b.cfg.RequestTimeout.String() +
			" (request_timeout), retry later, request id " + id
	}
	if errors.Is(err, domain.ErrUnavailable) {
		// The error quotes what pgx says, hosts, ports, users and
		// databases included: the client learns what failed and an id,
		// the log has the rest under that id.
		id := nuid.Next()
		b.log.Warn("postgresql unavailable", "request_id", id, "subject", subject, "err", err)
		return protocol.CodeUnavailable, domain.ErrUnavailable.Error() + ", retry later, request id " + id
	}
	for _, m := range []struct {
		sentinel error
		code     int
	}{
		{domain.ErrInvalid, protocol.CodeBadRequest},
		{domain.ErrNotFound, protocol.CodeNotFound},
		{domain.ErrConflict, protocol.CodeConflict},
		{domain.ErrTooLarge, protocol.CodeTooLarge},
		{domain.ErrLimit, protocol.CodeTooMany},
	} {
		if errors.Is(err, m.sentinel) {
			return m.code, err.Error()
		}
	}
	if errors.Is(err, context.Canceled) && b.ctx != nil && b.ctx.Err() != nil {
		return protocol.CodeUnavailable, "bridge stopping, retry"
	}
	id := nuid.Next()
	b.log.Error("internal error", "request_id", id, "subject", subject, "err", err)
	return protocol.CodeInternal, "internal error, request id " + id
}

// endpointOf returns t's stats of the endpoint a subject belongs to.
func (t *tenant) endpointOf(prefix, subject string) *endpointStats {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return nil
	}
	verb, _, _ := strings.Cut(rest, ".")
	return t.stats[verb]
}

// headerSafe keeps a message fit for a header value: one line.
func headerSafe(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// queueOf parses the request subject and returns t's queue it names.
func (b *Bridge) queueOf(t *tenant, req micro.Request) (domain.QueueRef, error) {
	_, queue, err := protocol.ParseSubject(b.cfg.Prefix, req.Subject())
	return domain.QueueRef{Tenant: t.name, Name: queue}, err
}

// storeCtx returns the context of one store call.
func (b *Bridge) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, b.cfg.RequestTimeout)
}

// Waiting returns how many pops are long-polling on this bridge.
func (b *Bridge) Waiting() int { return b.pops.waiting() }

// Running reports whether the bridge serves: started, not yet stopped,
// and connected on every tenant's connection. A drain counts as running
// until it ends.
func (b *Bridge) Running() bool {
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if !started {
		return false
	}
	select {
	case <-b.stopDone:
		return false
	default:
	}
	for _, t := range b.tenants {
		if !t.nc.IsConnected() {
			return false
		}
	}
	return true
}

// Stats are a bridge's figures since New, for metrics and tests.
type Stats struct {
	// InFlight is the requests taken and not yet answered.
	InFlight int
	// Waiting is the pops long-polling.
	Waiting int
	// Gated is the pops waiting in their group's line at the pop gate
	// for others of the group to finish (popgate.go).
	Gated int
	// PushTransactions and AckTransactions count the store calls of the
	// coalescers; requests per transaction tell how well they coalesce.
	PushTransactions int64
	AckTransactions  int64
	// PopStoreCalls counts the store calls of pops; WaiterChecks the
	// safety checks of waiting pops, one statement each however many
	// wait (see checkWaiters).
	PopStoreCalls int64
	WaiterChecks  int64
	// PopScans counts the pops' store calls that read every cursor of
	// their group in the ready set: the others find cursors by key.
	PopScans int64
	// PopsGated counts the pops that waited in their group's line at the
	// pop gate (Gated is how many wait now).
	PopsGated int64
	// PopHandoffs counts the waiting pops that a push answered with what
	// it stored, leased in its own transaction (handoff.go).
	PopHandoffs int64
	// DedupIDs is the producer ids the store holds in memory for
	// deduplication (store.Store.DedupCache).
	DedupIDs int64
	// Overloaded counts requests refused with 429 because a bound was
	// reached; Errors counts error replies of every kind.
	Overloaded int64
	Errors     int64
}

// Stats returns the bridge's figures. The micro framework counts requests
// per endpoint; see `nats micro stats comb`.
func (b *Bridge) Stats() Stats {
	st := Stats{
		InFlight:         b.track.count(),
		Waiting:          b.pops.waiting(),
		Gated:            b.pops.gate.lines(),
		PushTransactions: b.pushTx.Load(),
		AckTransactions:  b.ackTx.Load(),
		PopStoreCalls:    b.pops.storeCalls.Load(),
		WaiterChecks:     b.pops.checks.Load(),
		PopScans:         b.pops.scans.Load(),
		PopHandoffs:      b.pops.handoffs.Load(),
		PopsGated:        b.pops.gate.lined.Load(),
	}
	_, st.DedupIDs = b.st.DedupCache()
	for _, t := range b.tenants {
		for _, s := range t.stats {
			st.Overloaded += s.overloaded.Load()
			st.Errors += s.asyncErrors.Load() + s.syncErrors.Load()
		}
	}
	return st
}
