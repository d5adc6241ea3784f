package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/metrics"
	"github.com/combmq/comb/store"
	"github.com/combmq/comb/web"
)

// DefaultMonitorPort is the NATS monitoring port when neither a
// configuration file nor a setting names one.
const DefaultMonitorPort = 8222

// Config is the configuration of one Comb process. DefaultConfig is what
// `comb serve` runs with; Settings lists every field a user can set.
type Config struct {
	// DataDir holds Comb's local state and, without a PostgreSQL URL, the
	// private cluster in DataDir/postgres.
	DataDir string
	// Postgres says which PostgreSQL to use and how the store uses it.
	Postgres PostgresConfig
	// NATS configures the embedded server. Its zero fields are "unset":
	// the configuration file's value (NATS.Options) applies, else Comb's
	// default.
	NATS embeddednats.Config
	// Bridge tunes the bridge; a zero field takes the bridge's default.
	Bridge bridge.Config
	// SweepInterval is how often retention and dedup expiry run.
	SweepInterval time.Duration
	// Pprof, when set, serves net/http/pprof on this host:port.
	Pprof string
	// HTTP is the host:port of the HTTP listener (health, and what the
	// operator's tools serve there); "" turns it off. Loopback unless the
	// configuration says otherwise.
	HTTP string
	// HTTPDLQReplay lets the status page replay dead letters (a POST on
	// the HTTP listener, which has no authentication); off by default.
	HTTPDLQReplay bool
	// HTTPSampleInterval is how often the status page samples every
	// queue's totals for its rate charts; 0 means web.DefaultSampleInterval.
	HTTPSampleInterval time.Duration
	// Metrics serves Prometheus metrics at /metrics on the HTTP listener;
	// MetricsMaxQueues bounds their queue labels (see package metrics); 0
	// means metrics.DefaultMaxQueues.
	Metrics          bool
	MetricsMaxQueues int
	// LogLevel is the level the process logs at. Start logs through the
	// logger it is given; `comb serve` builds that logger at this level.
	LogLevel slog.Level

	// SpoolDir is the directory of the spool (package spool) that takes
	// pushes while PostgreSQL is away or the broker is in maintenance
	// mode; "" means DataDir/spool. SpoolMaxBytes bounds it; 0 turns the
	// spool off (such pushes answer 503).
	SpoolDir      string
	SpoolMaxBytes int64

	// GCPercent is the Go garbage collector's target (GOGC) and
	// MemoryLimit its soft memory limit (GOMEMLIMIT; 0 is none) for the
	// process of `comb serve`, which applies them at start unless the
	// environment's GOGC or GOMEMLIMIT is set; a zero GCPercent means
	// DefaultGCPercent. They are the process's, like LogLevel: Start leaves
	// them alone.
	GCPercent   int
	MemoryLimit int64
}

// DefaultGCPercent is the garbage collector's target unless the
// configuration or GOGC says otherwise: 400 rather than Go's 100. In the
// closed-loop reference shape it took the broker's CPU from 3.87-3.90 to
// 3.13-3.23 µs a message at about 1.8x the resident memory (73-76 MB to
// 132-137; docs/benchmarks.md, "The garbage collector's target").
const DefaultGCPercent = 400

// DefaultSpoolMaxBytes is the spool's bound unless the configuration says
// otherwise.
const DefaultSpoolMaxBytes = 1 << 30

// spoolDir is where the spool lives.
func (c Config) spoolDir() string {
	if c.SpoolDir != "" {
		return c.SpoolDir
	}
	return filepath.Join(c.DataDir, "spool")
}

// PostgresConfig is the PostgreSQL side of Config.
type PostgresConfig struct {
	// URL is the PostgreSQL to use; "" runs a private cluster in
	// DataDir/postgres.
	URL string
	// Port is the private cluster's loopback port; 0 picks a free one.
	Port int
	// MaxConns caps the store's connection pool; 0 means the store's
	// default.
	MaxConns int32
	// Warm readies the store's connections before the broker serves
	// (store.Warm); off, the pools open them as the first requests need
	// them, which then pay for their first statements.
	Warm bool
	// DurablePops makes a pop's lease commit wait for the WAL flush; see
	// store.Options.
	DurablePops bool
	// DurableAcks makes an ack's commit wait for the WAL flush; see
	// store.Options.
	DurableAcks bool
	// QueueCacheTTL is how long the store caches a queue's settings; 0
	// means the store's default.
	QueueCacheTTL time.Duration
	// StartWait is how long Start waits for a PostgreSQL that cannot be
	// reached, trying again with backoff; 0 fails at the first attempt.
	StartWait time.Duration
}

// DefaultConfig returns the configuration `comb serve` runs with when
// nothing is set, with the bridge's and the store's defaults filled in from
// their packages, so that -h and the docs show numbers.
func DefaultConfig() Config {
	return Config{
		DataDir: "./comb-data",
		Postgres: PostgresConfig{Port: 5433, MaxConns: store.DefaultMaxConns, Warm: true,
			QueueCacheTTL: store.DefaultQueueCacheTTL, StartWait: DefaultPostgresStartWait},
		SweepInterval:    time.Second,
		HTTP:             DefaultHTTP,
		Metrics:          true,
		MetricsMaxQueues: metrics.DefaultMaxQueues,
		LogLevel:         slog.LevelInfo,
		Bridge:           bridge.Config{}.WithDefaults(),
		SpoolMaxBytes:    DefaultSpoolMaxBytes,
		GCPercent:        DefaultGCPercent,
	}
}

// prefixRE is one NATS subject token without wildcards: the prefix is the
// first token of every Comb subject.
var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Validate reports every problem at once, so that one run fixes them all.
// Each names its setting by its flag (-push-workers is push_workers in the
// file and COMB_PUSH_WORKERS in the environment).
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s %s", flagName(key), fmt.Sprintf(format, args...)))
	}
	port := func(key string, p, min int, want string) {
		if p < min || p > 65535 {
			bad(key, "%d: want %s", p, want)
		}
	}

	if c.DataDir == "" {
		errs = append(errs, errors.New("-data-dir is empty"))
	}
	if c.Postgres.URL != "" {
		if _, err := pgx.ParseConfig(c.Postgres.URL); err != nil {
			errs = append(errs, fmt.Errorf("-postgres-url: %w", err))
		}
	}
	port("pg_port", c.Postgres.Port, 0, "a port, or 0 to pick a free one")
	if c.Postgres.MaxConns < 0 {
		bad("pg_max_conns", "%d: must not be negative", c.Postgres.MaxConns)
	}
	if c.Postgres.QueueCacheTTL < 0 {
		bad("queue_cache_ttl", "%s: must not be negative", c.Postgres.QueueCacheTTL)
	}
	if c.Postgres.StartWait < 0 {
		bad("pg_start_wait", "%s: must not be negative", c.Postgres.StartWait)
	}
	if c.SweepInterval < 10*time.Millisecond || c.SweepInterval > time.Hour {
		bad("sweep_interval", "%s: want between 10ms and 1h", c.SweepInterval)
	}
	if c.HTTP != "" {
		if _, p, err := net.SplitHostPort(c.HTTP); err != nil {
			bad("http", "%q: want host:port, such as %s", c.HTTP, DefaultHTTP)
		} else if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			bad("http", "%q: want a port, or 0 to pick a free one", c.HTTP)
		}
	}
	if i := c.HTTPSampleInterval; i != 0 && (i < web.MinSampleInterval || i > web.MaxSampleInterval) {
		bad("http_sample_interval", "%s: want between %s and %s", c.HTTPSampleInterval, web.MinSampleInterval, web.MaxSampleInterval)
	}
	if c.GCPercent != 0 && (c.GCPercent < 10 || c.GCPercent > 10000) {
		bad("gc_percent", "%d: want between 10 and 10000 (Go's own default is 100), or 0 for the default %d", c.GCPercent, DefaultGCPercent)
	}
	if c.MemoryLimit < 0 || (c.MemoryLimit > 0 && c.MemoryLimit < 32<<20) {
		bad("memory_limit", "%d: want at least 32MB, or 0 for none", c.MemoryLimit)
	}
	if c.SpoolMaxBytes < 0 {
		bad("spool_max_bytes", "%d: must not be negative (0 turns the spool off)", c.SpoolMaxBytes)
	}
	if c.MetricsMaxQueues < 0 {
		bad("metrics_max_queues", "%d: want at least 1, or 0 for the default %d", c.MetricsMaxQueues, metrics.DefaultMaxQueues)
	}
	if c.Pprof != "" {
		if err := checkLoopback(c.Pprof); err != nil {
			bad("pprof", "%q: %v", c.Pprof, err)
		}
	}

	n := c.NATS
	port("nats_listen", n.Port, -1, "a port, or 0 to pick a free one")
	if n.HTTPPort != embeddednats.NoMonitoring {
		port("nats_http", n.HTTPPort, -1, "a port, or 0 for off")
	}
	port("cluster_listen", n.Cluster.Port, -1, "a port, or 0 to pick a free one")
	if n.MaxPayload < 0 {
		bad("max_payload", "%d: must not be negative", n.MaxPayload)
	}
	if n.MaxPending < 0 {
		bad("max_pending", "%d: must not be negative", n.MaxPending)
	}
	if n.LameDuckDuration < 0 {
		bad("lame_duck_duration", "%s: must not be negative", n.LameDuckDuration)
	}
	if n.LameDuckGracePeriod < 0 {
		bad("lame_duck_grace_period", "%s: must not be negative", n.LameDuckGracePeriod)
	}
	if err := n.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("nats: %w", err))
	}

	b := c.Bridge.WithDefaults()
	if !prefixRE.MatchString(b.Prefix) {
		bad("prefix", "%q: want one subject token of letters, digits, '_' or '-'", b.Prefix)
	}
	if err := b.Validate(); err != nil {
		// The bridge names its fields by their keys; say them as flags.
		for _, e := range strings.Split(err.Error(), "\n") {
			if key, rest, _ := strings.Cut(e, " "); key != "prefix" {
				errs = append(errs, errors.New("-"+flagName(key)+" "+rest))
			}
		}
	}
	sortErrors(errs)
	return errors.Join(errs...)
}

// checkLoopback accepts host:port whose host is a loopback IP or localhost:
// pprof has no authentication and shows the process's insides (goroutine
// stacks, heap), so it is never served to the network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	if host == "" {
		host = "every interface"
	}
	return fmt.Errorf("pprof has no authentication and serves loopback only: want 127.0.0.1, ::1 or localhost, not %s", host)
}

// natsConfig is c.NATS with the bridge's prefix and the monitoring default applied: DefaultMonitorPort
// unless a setting or the file's http, http_port or monitor_port says
// otherwise.
func (c Config) natsConfig() embeddednats.Config {
	n := c.NATS
	fileMonitors := n.Options != nil && (n.Options.HTTPPort != 0 || n.Options.HTTPSPort != 0)
	if n.HTTPPort == 0 && !fileMonitors {
		n.HTTPPort = DefaultMonitorPort
	}
	// Comb's service subjects are denied to clients under its own prefix.
	n.ServicePrefix = c.Bridge.WithDefaults().Prefix
	return n
}
