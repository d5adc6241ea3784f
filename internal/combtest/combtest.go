// Package combtest starts a whole Comb for a test through package broker,
// so that tests run what `comb serve` runs, retention sweeper included: a
// fresh PostgreSQL schema with the store migrated, an embedded NATS server
// on a random port with monitoring off, and a bridge serving the protocol
// on it. Tests of the bridge, the clients and the loader talk to it over
// NATS like any client would.
//
// The test binary's TestMain must start PostgreSQL through pgtest:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }
//
// Start gives each test a Comb of its own. Open gives one to code without
// a test at hand, such as a pgtest.Runner fixture shared by a binary's
// runnable examples.
package combtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/broker"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/store"
)

// Env is a running Comb. Start's stops in t.Cleanup, Open's when its stop
// function is called.
type Env struct {
	// NC is a client connection to the server, over TCP like any client.
	NC *nats.Conn
	// URL is the NATS URL for other clients and the nats CLI.
	URL string
	// Store is the store the bridge serves, for checks behind its back.
	Store *store.Store
	// Bridge is the running bridge.
	Bridge *bridge.Bridge
	// Server is the embedded NATS server.
	Server *embeddednats.Server
	// PostgresURL is the test's PostgreSQL URL, whose search_path names
	// its own schema; another store opened on it sees the same queues.
	PostgresURL string
	// Broker is the running broker the fields above belong to.
	Broker *broker.Broker
}

// Options change what Start builds. The zero value is the usual Comb.
type Options struct {
	// Name begins the PostgreSQL schema's name, for whoever finds one left
	// behind; StartWith uses the test's name when it is empty.
	Name string
	// Bridge configures the bridge; zero fields take their defaults.
	Bridge bridge.Config
	// NATS configures the embedded server; Port is forced to a random one
	// and HTTPPort 0 means monitoring off.
	NATS embeddednats.Config
	// Store configures the store; its Logger is not used (Logger is).
	Store store.Options
	// SweepInterval is how often the retention sweeper runs; 0 means the
	// broker's default, as `comb serve` runs it.
	SweepInterval time.Duration
	// Logger receives every component's logs; nil discards.
	Logger *slog.Logger
	// HTTP is the broker's HTTP listener address, such as 127.0.0.1:0;
	// "" (the default) leaves it off.
	HTTP string
	// MetricsMaxQueues is the broker's metrics_max_queues; 0 means its
	// default.
	MetricsMaxQueues int
	// ClientOptions are added to Env.NC's connection: the credentials and
	// TLS settings a server with authentication wants.
	ClientOptions []nats.Option
	// Tune, when set, adjusts the broker configuration last, for settings
	// no field above names (such as the status page's).
	Tune func(*broker.Config)
}

// Config returns the broker configuration Open runs for opts on the
// PostgreSQL at pgURL: the defaults of `comb serve` with the test's
// settings, a random NATS port, monitoring and pprof off.
func (opts Options) Config(pgURL string) broker.Config {
	cfg := broker.DefaultConfig()
	cfg.Postgres.URL = pgURL
	cfg.Postgres.MaxConns = opts.Store.MaxConns
	cfg.Postgres.DurablePops = opts.Store.DurablePops
	cfg.Postgres.DurableAcks = opts.Store.DurableAcks
	// No warming (pg_warm): tests start brokers by the hundred, and it
	// costs each about half a second of both cores; the broker's
	// TestStartWarmsTheStore covers it.
	cfg.Postgres.Warm = false
	cfg.Postgres.QueueCacheTTL = opts.Store.QueueCacheTTL
	// Zero fields take the bridge's defaults, as they always have here.
	cfg.Bridge = opts.Bridge
	cfg.NATS = opts.NATS
	cfg.NATS.Port = -1
	if cfg.NATS.HTTPPort == 0 {
		cfg.NATS.HTTPPort = embeddednats.NoMonitoring
	}
	if cfg.NATS.ReadyTimeout == 0 {
		cfg.NATS.ReadyTimeout = 10 * time.Second
	}
	if opts.SweepInterval != 0 {
		cfg.SweepInterval = opts.SweepInterval
	}
	cfg.Pprof = ""
	cfg.HTTP = opts.HTTP
	// No spool unless a test asks for one (Tune: SpoolMaxBytes and a
	// SpoolDir of its own): the default directory is under ./comb-data,
	// which brokers of one test binary would share.
	cfg.SpoolMaxBytes = 0
	if opts.Tune != nil {
		opts.Tune(&cfg)
	}
	if opts.MetricsMaxQueues != 0 {
		cfg.MetricsMaxQueues = opts.MetricsMaxQueues
	}
	return cfg
}

// Start starts a Comb with default settings; see StartWith.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith starts a Comb for t, as Open does, and stops it when t ends.
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if opts.Name == "" {
		opts.Name = t.Name()
	}
	env, stop, err := Open(ctx, opts)
	require.NoError(t, err, "start comb")
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("combtest: %v", err)
		}
	})
	return env
}

// Open starts a Comb outside any test, for fixtures that outlive one, such
// as the Comb a package's runnable examples talk to (see pgtest.Runner's
// With): a broker (see Options.Config) on a fresh schema, and a client
// connection to it over TCP. ctx bounds only the start. stop stops it all
// and drops the schema; call it after the last use and before PostgreSQL
// stops. When Open fails it has already stopped whatever it started.
func Open(ctx context.Context, opts Options) (env *Env, stop func() error, err error) {
	// Everything started is undone in reverse, by stop or on failure.
	var undo []func() error
	stop = sync.OnceValue(func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	})
	fail := func(what string, err error) (*Env, func() error, error) {
		return nil, nil, errors.Join(fmt.Errorf("combtest: %s: %w", what, err), stop())
	}
	quiet := func(f func()) func() error { return func() error { f(); return nil } }

	name := opts.Name
	if name == "" {
		name = "combtest"
	}
	pgURL, drop, err := pgtest.Schema(ctx, name)
	if err != nil {
		return fail("create schema", err)
	}
	undo = append(undo, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return drop(ctx)
	})

	b, err := broker.Start(ctx, opts.Config(pgURL), opts.Logger)
	if err != nil {
		return fail("start broker", err)
	}
	undo = append(undo, quiet(b.Stop))
	env = &Env{
		PostgresURL: pgURL,
		Store:       b.Store(),
		Bridge:      b.Bridge(),
		Server:      b.Server(),
		URL:         b.ClientURL(),
		Broker:      b,
	}

	nc, err := nats.Connect(env.URL, append([]nats.Option{nats.Name("comb-test-client"), nats.MaxReconnects(0)},
		opts.ClientOptions...)...)
	if err != nil {
		return fail("client connection", err)
	}
	undo = append(undo, quiet(nc.Close))
	env.NC = nc
	return env, stop, nil
}

// AddBridge starts another bridge on env's NATS server and PostgreSQL
// schema, with its own store and connection, as a second broker process
// would; it stops in t.Cleanup. It is not a second broker: a second
// process's NATS server would join the first in a cluster, which the
// clustering work will give combtest; until then both bridges share one
// server, which is what the queue group sees either way.
func AddBridge(t testing.TB, env *Env, cfg bridge.Config) *bridge.Bridge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The store counts queues against the same max_queues, as a second
	// broker with the same configuration would.
	st, err := store.Open(ctx, env.PostgresURL, store.Options{
		MaxQueues: func(tenant string) int64 { return cfg.Quotas.Of(tenant).MaxQueues },
	})
	require.NoError(t, err, "open store")
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx), "migrate store")
	nc, err := env.Server.Connect(nats.Name("comb-bridge-2"))
	require.NoError(t, err, "bridge connection")
	t.Cleanup(nc.Close)
	br, err := bridge.New(nc, st, cfg, nil)
	require.NoError(t, err, "new bridge")
	require.NoError(t, br.Start(ctx), "start bridge")
	t.Cleanup(br.Stop)
	return br
}
