// Package broker assembles one Comb process from one Config: PostgreSQL (a
// private cluster or a URL), the store and its migrations, the retention
// sweeper, pprof, the embedded NATS server and the bridge.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/buildinfo"
	"github.com/combmq/comb/internal/pgcluster"
	"github.com/combmq/comb/metrics"
	"github.com/combmq/comb/spool"
	"github.com/combmq/comb/store"
	"github.com/combmq/comb/web"
)

// Broker is a running Comb process: everything Start built, until Stop.
type Broker struct {
	cfg   Config
	log   *slog.Logger
	pgURL string
	// pgLogURL is pgURL fit for a log: the private cluster's URL that
	// names its password file, or the configured URL redacted.
	pgLogURL string
	st       *store.Store
	srv      *embeddednats.Server
	br       *bridge.Bridge
	http     *httpServer // nil when Config.HTTP is ""
	started  time.Time
	metrics  *metrics.Metrics // nil unless served

	undo     []func() // what Start built, undone in reverse by Stop
	stopOnce sync.Once
	lameDuck atomic.Bool // StopLameDuck: the server lets clients go slowly
	ready    atomic.Bool // started and not stopping, for /readyz
}

// Start validates cfg and builds a broker in order: PostgreSQL (a private
// cluster in DataDir/postgres, or Postgres.URL), the store and its
// migrations, the retention sweeper, pprof, the embedded NATS server, the
// in-process connection and the bridge. ctx bounds only the start; the
// broker runs until Stop. When Start fails it has already undone what it
// built. log nil discards.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("broker: config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Broker{cfg: cfg, log: log, started: time.Now()}
	if err := b.start(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

func (b *Broker) start(ctx context.Context) error {
	cfg, log := b.cfg, b.log
	// Everything below outlives ctx, which bounds only the start: a drain
	// still writes to PostgreSQL after the first signal.
	life := context.WithoutCancel(ctx)

	b.pgURL = cfg.Postgres.URL
	if b.pgURL == "" {
		cl, err := startPrivate(ctx, cfg, log)
		if err != nil {
			return err
		}
		b.undo = append(b.undo, func() {
			if err := cl.Stop(); err != nil {
				log.Error("stop private postgresql", "err", err)
				return
			}
			log.Info("private postgresql stopped")
		})
		// A postmaster that dies by itself comes back by itself.
		sctx, scancel := context.WithCancel(life)
		supervised := make(chan struct{})
		go func() { defer close(supervised); cl.Supervise(sctx) }()
		b.undo = append(b.undo, func() { scancel(); <-supervised })
		b.pgURL, b.pgLogURL = cl.URL(), cl.PassfileURL()
	} else {
		b.pgLogURL = RedactURL(b.pgURL)
		log.Info("using postgresql", "url", b.pgLogURL)
	}

	quotas := cfg.Bridge.Quotas
	opts := store.Options{
		MaxConns:      cfg.Postgres.MaxConns,
		DurablePops:   cfg.Postgres.DurablePops,
		DurableAcks:   cfg.Postgres.DurableAcks,
		QueueCacheTTL: cfg.Postgres.QueueCacheTTL,
		MaxQueues:     func(tenant string) int64 { return quotas.Of(tenant).MaxQueues },
		Logger:        log.With("component", "store"),
	}
	if cfg.Postgres.Warm {
		// The pools keep, and warm, as many connections as the bridge's
		// workers use at once: the push and ack workers' and the pops',
		// and two for the sweeper and the parked pops' check.
		bdef := cfg.Bridge.WithDefaults()
		opts.WarmConns, opts.WarmPopConns = int32(bdef.PushWorkers+bdef.AckWorkers+2), int32(bdef.PopWorkers)
	}
	st, err := store.Open(life, b.pgURL, opts)
	if err != nil {
		return err
	}
	b.undo = append(b.undo, st.Close)
	b.st = st
	if err := b.migrateWaiting(ctx, st); err != nil {
		return err
	}
	if cfg.Postgres.Warm {
		b.warm(ctx, st)
	}

	// Retention and dedup expiry run on every broker; sweeps are safe to
	// overlap.
	sctx, scancel := context.WithCancel(life)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		st.RunSweeper(sctx, cfg.SweepInterval)
	}()
	b.undo = append(b.undo, func() { scancel(); <-swept })

	if cfg.HTTP != "" {
		h, err := listenHTTP(cfg.HTTP, log)
		if err != nil {
			return err
		}
		b.undo = append(b.undo, h.stop)
		h.mux.HandleFunc("GET /readyz", b.readyz)
		b.http = h
		if cfg.Metrics {
			if err := b.serveMetrics(); err != nil {
				return err
			}
		}
	}

	if cfg.Pprof != "" {
		stop, err := servePprof(cfg.Pprof, log)
		if err != nil {
			return err
		}
		b.undo = append(b.undo, stop)
	}

	ncfg := cfg.natsConfig()
	if ncfg.Logger == nil {
		ncfg.Logger = log
	}
	srv, err := embeddednats.Start(ncfg)
	if err != nil {
		return err
	}
	b.undo = append(b.undo, func() {
		if b.lameDuck.Load() {
			srv.LameDuck()
			return
		}
		srv.Shutdown()
	})
	b.srv = srv
	nc, err := srv.Connect(nats.Name("comb-bridge"))
	if err != nil {
		return err
	}
	b.undo = append(b.undo, nc.Close)

	// Tenants are the configuration's accounts: the bridge serves each on a
	// connection of its own, in that account, and learns a request's
	// tenant from the connection it arrives on.
	var tenants []bridge.Tenant
	for _, name := range srv.Tenants() {
		tc := nc
		if name != "" {
			if tc, err = srv.ConnectTenant(name, nats.Name("comb-bridge")); err != nil {
				return err
			}
			b.undo = append(b.undo, tc.Close)
		}
		tenants = append(tenants, bridge.Tenant{Name: name, Conn: tc,
			Interest: func(subject string) bool { return srv.HasInterest(name, subject) }})
	}
	bcfg := cfg.Bridge.WithDefaults()
	if b.metrics != nil {
		bcfg.Observer = b.metrics
	}
	if cfg.SpoolMaxBytes > 0 {
		sp, err := spool.Open(cfg.spoolDir(), spool.Options{MaxBytes: cfg.SpoolMaxBytes, Logger: log.With("component", "spool")})
		if err != nil {
			return err
		}
		// Closed after the bridge has stopped: undo runs backwards.
		b.undo = append(b.undo, func() {
			if err := sp.Close(); err != nil {
				log.Warn("close the spool", "err", err)
			}
		})
		if st := sp.Stats(); st.Records > 0 {
			log.Info("spool holds records to drain", "dir", sp.Dir(), "records", st.Records, "messages", st.Messages, "bytes", st.Bytes)
		}
		bcfg.Spool = sp
	}
	br, err := bridge.New(nc, st, bcfg, log.With("component", "bridge"), tenants...)
	if err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	if b.metrics != nil {
		b.metrics.WatchBridge(br.Stats)
		b.metrics.WatchSpool(br.SpoolStats)
	}
	// The bridge's own context ends only after Stop has drained it: a
	// drain answers what was taken instead of cutting it off.
	bctx, bcancel := context.WithCancel(life)
	b.undo = append(b.undo, bcancel)
	if err := br.Start(bctx); err != nil {
		return fmt.Errorf("start bridge: %w", err)
	}
	b.undo = append(b.undo, func() {
		log.Info("draining the bridge")
		br.Stop()
	})
	b.br = br

	if b.http != nil {
		page := web.Start(life, web.Options{
			Store:          st,
			NATSReady:      func() bool { return srv.NATS().Running() && srv.NATS().ReadyForConnections(50*time.Millisecond) },
			BridgeRunning:  br.Running,
			Spool:          b.webSpool,
			Version:        buildinfo.Version(),
			Started:        b.started,
			Replay:         cfg.HTTPDLQReplay,
			SampleInterval: cfg.HTTPSampleInterval,
			Logger:         log.With("component", "web"),
		})
		b.undo = append(b.undo, page.Stop)
		page.Register(b.http.mux)
	}
	b.ready.Store(true)
	return nil
}

// serveMetrics registers Comb's metrics on a registry of the broker's
// own and serves it at /metrics on the HTTP listener.
func (b *Broker) serveMetrics() error {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{
		MaxQueues: b.cfg.MetricsMaxQueues,
		Store:     b.st,
		Logger:    b.log.With("component", "metrics"),
	})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	b.metrics = m
	b.http.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(b.log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
	}))
	return nil
}

// startPrivate starts (or reuses) the private cluster in DataDir/postgres.
func startPrivate(ctx context.Context, cfg Config, log *slog.Logger) (*pgcluster.Cluster, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "postgres"))
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	cl, err := pgcluster.Start(ctx, pgcluster.Options{
		Dir:      dir,
		Port:     cfg.Postgres.Port,
		Settings: pgcluster.DurableSettings(),
		Logger:   log,
	})
	if errors.Is(err, pgcluster.ErrPortInUse) {
		return nil, fmt.Errorf("private postgresql: port %d is taken; choose another with -pg-port (COMB_PG_PORT, pg_port in the file): %w",
			cfg.Postgres.Port, err)
	}
	if err != nil {
		return nil, fmt.Errorf("private postgresql: %w", err)
	}
	return cl, nil
}

// Stop tears the broker down in the reverse order of Start: it drains the
// bridge first (requests taken are answered), then closes the connection,
// the NATS server, pprof, the sweeper and the store, and stops the private
// PostgreSQL last. It is safe to call twice.
func (b *Broker) Stop() {
	b.stop()
}

// StopLameDuck stops like Stop, but once the bridge has answered what was
// in flight, the NATS server enters lame duck mode instead of closing every
// client at once: it stops accepting connections and closes the clients
// it has spread over lame_duck_duration, so that in a cluster they move to
// the other brokers without a burst of reconnects. `comb serve` does this
// on SIGTERM.
func (b *Broker) StopLameDuck() {
	b.lameDuck.Store(true)
	b.stop()
}

func (b *Broker) stop() {
	b.ready.Store(false)
	b.stopOnce.Do(func() {
		for i := len(b.undo) - 1; i >= 0; i-- {
			b.undo[i]()
		}
	})
}

// ClientURL returns the URL NATS clients connect to, with the port
// actually bound.
func (b *Broker) ClientURL() string { return b.srv.ClientURL() }

// MonitorURL returns the NATS monitoring base URL, or "" when it is off.
func (b *Broker) MonitorURL() string { return b.srv.MonitorURL() }

// PostgresURL returns the URL of the PostgreSQL the store uses: the
// configured one, or the private cluster's. It may hold a password: log
// LogPostgresURL instead.
func (b *Broker) PostgresURL() string { return b.pgURL }

// LogPostgresURL returns PostgresURL without its password, fit for a log:
// for the private cluster, a URL that names the cluster's password file
// (pgx and psql read it; only root and the server's OS user can), so that
// what `comb serve` logs is enough for `comb loadtest -postgres-url`.
func (b *Broker) LogPostgresURL() string { return b.pgLogURL }

// Prefix returns the first token of every subject the bridge serves.
func (b *Broker) Prefix() string { return b.cfg.Bridge.WithDefaults().Prefix }

// HTTPURL returns the HTTP listener's base URL (http://host:port, with the
// port actually bound), or "" when it is off.
func (b *Broker) HTTPURL() string {
	if b.http == nil {
		return ""
	}
	return "http://" + b.http.addr.String()
}

// Store returns the store the bridge serves.
func (b *Broker) Store() *store.Store { return b.st }

// Bridge returns the running bridge.
func (b *Broker) Bridge() *bridge.Bridge { return b.br }

// Server returns the embedded NATS server, whose Connect gives further
// in-process connections.
func (b *Broker) Server() *embeddednats.Server { return b.srv }

// RedactURL hides a password before a URL goes into a log.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(connection string)"
}

// servePprof serves the net/http/pprof handlers, for profiling a broker
// under load; it returns a function that stops the listener. Validate has
// made sure addr is a loopback address.
func servePprof(addr string, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", redactedCmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server", "err", err)
		}
	}()
	log.Info("pprof listening", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { _ = srv.Close() }, nil
}

// redactedCmdline is pprof.Cmdline with secrets hidden: the command line
// may carry -postgres-url with its password.
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(RedactArgs(os.Args), "\x00"))
}

// RedactArgs returns a command line with every URL's password, and the
// value of every flag whose name says password, token, secret or creds,
// replaced by xxxxx.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	secretFlag := func(a string) bool {
		name := strings.ToLower(strings.TrimLeft(a, "-"))
		return strings.HasPrefix(a, "-") && (strings.Contains(name, "password") || strings.Contains(name, "token") ||
			strings.Contains(name, "secret") || strings.Contains(name, "creds"))
	}
	for i, a := range args {
		switch name, _, hasValue := strings.Cut(a, "="); {
		case secretFlag(name) && hasValue:
			out[i] = name + "=xxxxx"
		case i > 0 && secretFlag(args[i-1]) && !strings.Contains(args[i-1], "="):
			out[i] = "xxxxx"
		default:
			out[i] = redactURLs(a)
		}
	}
	return out
}

// redactURLs hides the password of a URL in a (-flag=)value.
func redactURLs(a string) string {
	prefix, v := "", a
	if strings.HasPrefix(a, "-") {
		if name, val, ok := strings.Cut(a, "="); ok {
			prefix, v = name+"=", val
		}
	}
	if u, err := url.Parse(v); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return prefix + u.Redacted()
		}
	}
	return a
}

// warm readies the store's connections before the bridge serves (see
// store.Warm). A failure only leaves that cost to the first requests.
func (b *Broker) warm(ctx context.Context, st *store.Store) {
	began := time.Now()
	res, err := st.Warm(ctx)
	if err != nil {
		b.log.Warn("warm the store's connections", "err", err)
		return
	}
	b.log.Info("store connections warmed", "connections", res.Conns, "statements", res.Statements, "took", time.Since(began).Round(time.Millisecond))
}
