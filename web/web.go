// Package web is the status page: embedded HTML/JS/CSS and the JSON it
// reads, served on the broker's HTTP listener.
//
// The page (GET /) polls GET /api/overview every few seconds: health, the
// queues of every tenant with their figures and rate series, and the spool
// state. GET /api/queue and GET /api/dlq give one queue's partitions,
// groups and dead letters; POST /api/dlq/replay replays dead letters when
// Options.Replay allows it. Rates come from an in-memory ring of samples
// of every queue's totals (store.Totals, one query per sample).
package web

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/combmq/comb/store"
)

// Sampling bounds: the ring keeps Samples samples, so the charts span
// Samples × the interval (15 minutes at the default).
const (
	DefaultSampleInterval = 5 * time.Second
	MinSampleInterval     = 100 * time.Millisecond
	MaxSampleInterval     = time.Minute
	Samples               = 180
)

// DefaultMaxQueues caps the queues the page shows and samples, so that a
// broker with many queues costs the same per sample; the page says when
// more exist.
const DefaultMaxQueues = 50

// NoSpool is what the page says of a broker without a spool.
const NoSpool = "no spool (spool_max_bytes is 0): pushes answer 503 while PostgreSQL is away"

//go:embed assets
var assets embed.FS

// Options configure a Page. Store is required; the rest have defaults.
type Options struct {
	Store *store.Store
	// NATSReady and BridgeRunning report the broker's parts for the
	// health line; nil reports false.
	NATSReady     func() bool
	BridgeRunning func() bool
	// Spool reports the broker's spool for its card; nil shows NoSpool.
	Spool func() Spool
	// Version is the build's version; Started is when the broker started
	// (uptime counts from it).
	Version string
	Started time.Time
	// Replay enables POST /api/dlq/replay.
	Replay bool
	// SampleInterval is how often the queues' totals are sampled;
	// 0 means DefaultSampleInterval.
	SampleInterval time.Duration
	// MaxQueues caps the queues shown and sampled; 0 means
	// DefaultMaxQueues.
	MaxQueues int
	// Logger receives sampling errors; nil discards.
	Logger *slog.Logger
}

// Page serves the status page and samples the queues' totals until Stop.
type Page struct {
	opts Options
	log  *slog.Logger
	ring *ring
	// every is the time from one sample's start to the next's, in ms:
	// the interval, or longer after a slow sample (sampleWait).
	every atomic.Int64

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start returns a Page whose sampler runs until Stop: it takes a sample at
// once, then one every SampleInterval. ctx bounds the sampler too.
func Start(ctx context.Context, opts Options) *Page {
	if opts.SampleInterval <= 0 {
		opts.SampleInterval = DefaultSampleInterval
	}
	if opts.MaxQueues <= 0 {
		opts.MaxQueues = DefaultMaxQueues
	}
	if opts.Started.IsZero() {
		opts.Started = time.Now()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Page{opts: opts, log: opts.Logger, ring: newRing(Samples), cancel: cancel, done: make(chan struct{})}
	go p.sample(ctx)
	return p
}

// Stop ends the sampler and waits for it. It is safe to call twice.
func (p *Page) Stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}

// Register adds the page and its API to mux.
func (p *Page) Register(mux *http.ServeMux) {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded folder is part of the binary
	}
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", noCache(files))
	mux.Handle("GET /assets/", noCache(http.StripPrefix("/assets", files)))
	mux.HandleFunc("GET /api/overview", p.handleOverview)
	mux.HandleFunc("GET /api/queue", p.handleQueue)
	mux.HandleFunc("GET /api/dlq", p.handleDLQ)
	mux.HandleFunc("POST /api/dlq/replay", p.handleReplay)
}

// noCache makes a browser revalidate the assets, so that a new build's page
// shows after a restart.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}

// sample reads the totals now and every SampleInterval into the ring, or
// less often when the query is slow (sampleWait).
func (p *Page) sample(ctx context.Context) {
	defer close(p.done)
	for {
		began := time.Now()
		p.sampleOnce(ctx)
		took := time.Since(began)
		wait := sampleWait(p.opts.SampleInterval, took)
		p.every.Store((took + wait).Milliseconds())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// sampleWait is how long the sampler waits after a sample that took
// took, counted from when it began: the interval, or twenty times what
// the sample took when that is longer, so that sampling keeps PostgreSQL
// busy a twentieth of the time at most. The totals' cost grows with the
// partitions and groups of the queues sampled: with one queue of 200,000
// partitions and two groups a sample took 415 ms on average here, a
// twelfth of PostgreSQL's time at one every 5 s on an idle broker, and
// that grows with the partitions. Rates are per second over
// the samples' own times, so a longer wait changes no figure.
//
// A sample quicker than samplePaceFloor keeps the interval: with the
// shortest intervals (tests sample every 100 ms) such a sample costs
// little, and the charts keep the spacing asked for.
func sampleWait(interval, took time.Duration) time.Duration {
	if took < samplePaceFloor {
		return max(interval-took, 0)
	}
	return max(interval, sampleCostShare*took) - took
}

const (
	// sampleCostShare is the inverse of the share of time sampling may
	// take.
	sampleCostShare = 20
	// samplePaceFloor is the shortest sample that makes the sampler wait
	// longer than its interval.
	samplePaceFloor = 50 * time.Millisecond
)

func (p *Page) sampleOnce(life context.Context) {
	ctx, cancel := context.WithTimeout(life, max(p.opts.SampleInterval, time.Second))
	defer cancel()
	// The sample's time is when its query began, the nearest to the
	// snapshot it reads: a sample timed after a commit has seen it.
	now := time.Now()
	totals, err := p.opts.Store.Totals(ctx, p.opts.MaxQueues)
	if err != nil {
		if life.Err() != nil {
			return // stopping
		}
		p.log.Warn("status page: sample queue totals", "err", err)
		p.ring.fail(now, err)
		return
	}
	p.ring.add(now, totals)
}
