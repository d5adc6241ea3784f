package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/pgcluster"
	"github.com/combmq/comb/store"
)

func init() {
	Register(Command{Name: "serve", Summary: "run the broker: embedded NATS, the bridge, and PostgreSQL", Run: runServe})
}

const serveSynopsis = `Run the broker: an embedded NATS server, the bridge that serves the Comb
protocol on it, and PostgreSQL. Without -postgres-url, a private PostgreSQL
cluster is created (first run) or reused in <data-dir>/postgres, from the
PostgreSQL installed on this machine. The first SIGINT or SIGTERM drains and
exits 0; a second one exits at once with 1.`

// serveConfig is `comb serve`'s configuration, from flags and environment.
type serveConfig struct {
	NATSListen  string // host:port of the NATS client listener; port 0 picks one
	NATSHTTP    int    // NATS monitoring port; 0 off
	PostgresURL string // "" means a private cluster in DataDir
	DataDir     string
	PGPort      int // the private cluster's port; 0 picks one
	LogLevel    string
	Prefix      string
	// SweepInterval is how often retention and dedup expiry run.
	SweepInterval time.Duration
	// PprofListen, when set, serves net/http/pprof on this address.
	PprofListen string
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		NATSListen: "127.0.0.1:4222",
		NATSHTTP:   8222,
		DataDir:    "./comb-data",
		PGPort:     5433,
		LogLevel:   "info",
		Prefix:     "comb",

		SweepInterval: time.Second,
	}
}

// prefixRE is one NATS subject token without wildcards: the prefix is the
// first token of every Comb subject.
var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// validate reports every problem at once, so one run fixes them all.
func (c serveConfig) validate() error {
	var errs []error
	if _, _, err := c.natsAddr(); err != nil {
		errs = append(errs, err)
	}
	if c.NATSHTTP < 0 || c.NATSHTTP > 65535 {
		errs = append(errs, fmt.Errorf("-nats-http %d: want a port, or 0 for off", c.NATSHTTP))
	}
	if c.PostgresURL != "" {
		if _, err := pgx.ParseConfig(c.PostgresURL); err != nil {
			errs = append(errs, fmt.Errorf("-postgres-url: %w", err))
		}
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("-data-dir is empty"))
	}
	if c.PGPort < 0 || c.PGPort > 65535 {
		errs = append(errs, fmt.Errorf("-pg-port %d: want a port, or 0 to pick a free one", c.PGPort))
	}
	if _, err := c.level(); err != nil {
		errs = append(errs, err)
	}
	if c.SweepInterval < 10*time.Millisecond || c.SweepInterval > time.Hour {
		errs = append(errs, fmt.Errorf("-sweep-interval %s: want between 10ms and 1h", c.SweepInterval))
	}
	if c.PprofListen != "" {
		if _, _, err := net.SplitHostPort(c.PprofListen); err != nil {
			errs = append(errs, fmt.Errorf("-pprof %q: %w", c.PprofListen, err))
		}
	}
	if !prefixRE.MatchString(c.Prefix) {
		errs = append(errs, fmt.Errorf("-prefix %q: want one subject token of letters, digits, '_' or '-'", c.Prefix))
	}
	return errors.Join(errs...)
}

// natsAddr splits NATSListen; port 0 becomes -1, the embedded server's
// "pick a free port".
func (c serveConfig) natsAddr() (string, int, error) {
	host, p, err := net.SplitHostPort(c.NATSListen)
	if err != nil {
		return "", 0, fmt.Errorf("-nats-listen %q: %w", c.NATSListen, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("-nats-listen %q: bad port", c.NATSListen)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	if port == 0 {
		port = -1
	}
	return host, port, nil
}

func (c serveConfig) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return 0, fmt.Errorf("-log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	return l, nil
}

// parseServe reads flags, then environment twins, then validates. Errors
// have been printed to w when it returns.
func parseServe(args []string, getenv func(string) string, w io.Writer) (serveConfig, error) {
	cfg := defaultServeConfig()
	fs := newFlagSet("serve", serveSynopsis, w)
	fs.StringVar(&cfg.NATSListen, "nats-listen", cfg.NATSListen, "NATS client listen address, host:port; port 0 picks a free one")
	fs.IntVar(&cfg.NATSHTTP, "nats-http", cfg.NATSHTTP, "NATS monitoring port (/varz, /connz) on the listen host; 0 turns it off")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", cfg.PostgresURL, "PostgreSQL URL; empty runs a private cluster in <data-dir>/postgres")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for Comb's local state and the private PostgreSQL cluster")
	fs.IntVar(&cfg.PGPort, "pg-port", cfg.PGPort, "loopback port of the private PostgreSQL cluster; 0 picks a free one")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "first token of every Comb subject")
	fs.StringVar(&cfg.PprofListen, "pprof", cfg.PprofListen, "serve Go's pprof profiles on this host:port (e.g. 127.0.0.1:6060); empty is off")
	fs.DurationVar(&cfg.SweepInterval, "sweep-interval", cfg.SweepInterval, "how often retention (completed_retention_s, max_age_s) and dedup expiry run")
	if err := parseWithEnv(fs, args, getenv); err != nil {
		return cfg, err
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(w, "comb serve: %v\n", err)
		return cfg, err
	}
	return cfg, nil
}

func runServe(ctx context.Context, env Env, args []string) int {
	cfg, err := parseServe(args, env.Getenv, env.Stderr)
	if err != nil {
		return usageExit(err)
	}
	level, _ := cfg.level()
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go watchSignals(sigs, done, cancel, env.Exit, log)

	if err := serve(ctx, cfg, log); err != nil {
		log.Error("comb serve failed", "err", err)
		return 1
	}
	log.Info("comb stopped")
	return 0
}

// watchSignals turns the first signal into a drain (cancel) and the second
// into an immediate exit, for an operator who will not wait.
func watchSignals(sigs <-chan os.Signal, done <-chan struct{}, cancel func(), exit func(int), log *slog.Logger) {
	select {
	case s := <-sigs:
		log.Info("signal received, draining; send another to exit at once", "signal", s.String())
		cancel()
	case <-done:
		return
	}
	select {
	case s := <-sigs:
		log.Warn("second signal, exiting at once", "signal", s.String())
		exit(1)
	case <-done:
	}
}

// serve runs the broker until ctx ends, then drains: the bridge first (it
// answers what it has taken), then NATS, the store, and PostgreSQL last.
func serve(ctx context.Context, cfg serveConfig, log *slog.Logger) error {
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	pgURL := cfg.PostgresURL
	if pgURL == "" {
		dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "postgres"))
		if err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		cl, err := pgcluster.Start(ctx, pgcluster.Options{
			Dir:      dir,
			Port:     cfg.PGPort,
			Settings: pgcluster.DurableSettings(),
			Logger:   log,
		})
		if errors.Is(err, pgcluster.ErrPortInUse) {
			return fmt.Errorf("private postgresql: port %d is taken; choose another with -pg-port (COMB_PG_PORT): %w", cfg.PGPort, err)
		}
		if err != nil {
			return fmt.Errorf("private postgresql: %w", err)
		}
		cleanups = append(cleanups, func() {
			if err := cl.Stop(); err != nil {
				log.Error("stop private postgresql", "err", err)
				return
			}
			log.Info("private postgresql stopped")
		})
		pgURL = cl.URL()
	} else {
		log.Info("using postgresql", "url", redactURL(pgURL))
	}

	// The pool outlives the first signal: draining still writes.
	st, err := store.Open(context.WithoutCancel(ctx), pgURL, store.Options{Logger: log.With("component", "store")})
	if err != nil {
		return err
	}
	cleanups = append(cleanups, st.Close)
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	if cfg.PprofListen != "" {
		stop, err := servePprof(cfg.PprofListen, log)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, stop)
	}
	// Retention and dedup expiry run on every bridge; sweeps are safe to
	// overlap.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		st.RunSweeper(sctx, cfg.SweepInterval)
	}()
	cleanups = append(cleanups, func() { scancel(); <-swept })

	host, port, _ := cfg.natsAddr()
	srv, err := embeddednats.Start(embeddednats.Config{Host: host, Port: port, HTTPPort: cfg.NATSHTTP, Logger: log})
	if err != nil {
		return err
	}
	cleanups = append(cleanups, srv.Shutdown)
	nc, err := srv.Connect(nats.Name("comb-bridge"))
	if err != nil {
		return err
	}
	cleanups = append(cleanups, nc.Close)

	b, err := bridge.New(nc, st, bridge.Config{Prefix: cfg.Prefix}, log.With("component", "bridge"))
	if err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	// The bridge's own context ends only after Stop has drained it: the
	// first signal asks for a drain, not for in-flight work to be cut.
	bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
	cleanups = append(cleanups, bcancel)
	if err := b.Start(bctx); err != nil {
		return fmt.Errorf("start bridge: %w", err)
	}
	cleanups = append(cleanups, func() {
		log.Info("draining the bridge")
		b.Stop()
	})

	attrs := []any{"nats", srv.ClientURL(), "prefix", cfg.Prefix, "postgres", redactURL(pgURL)}
	if u := srv.MonitorURL(); u != "" {
		attrs = append(attrs, "monitor", u)
	}
	log.Info("comb ready", attrs...)
	<-ctx.Done()
	return nil
}

// redactURL hides a password before a URL goes into the log.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(connection string)"
}

// servePprof serves the net/http/pprof handlers, for profiling a broker
// under load; it returns a function that stops the listener.
func servePprof(addr string, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
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
