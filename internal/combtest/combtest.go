// Package combtest starts a whole Comb for a test: a fresh PostgreSQL
// schema with the store migrated, an embedded NATS server on a random port,
// and a bridge serving the protocol on it. Tests of the bridge, the
// clients and the loader talk to it over NATS like any client would.
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
}

// Options change what Start builds. The zero value is the usual Comb.
type Options struct {
	// Name begins the PostgreSQL schema's name, for whoever finds one left
	// behind; StartWith uses the test's name when it is empty.
	Name string
	// Bridge configures the bridge; zero fields take their defaults.
	Bridge bridge.Config
	// NATS configures the embedded server; Port is forced to a random one.
	NATS embeddednats.Config
	// Store configures the store.
	Store store.Options
	// Logger receives the bridge's and the store's logs; nil discards.
	Logger *slog.Logger
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
// With): a store on a fresh schema (migrated), an embedded NATS server on a
// random port, and a bridge on an in-process connection to it. ctx bounds
// only the start. stop stops it all and drops the schema; call it after
// the last use and before PostgreSQL stops. When Open fails it has already
// stopped whatever it started.
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
	env = &Env{PostgresURL: pgURL}

	storeOpts := opts.Store
	if storeOpts.Logger == nil {
		storeOpts.Logger = opts.Logger
	}
	st, err := store.Open(ctx, pgURL, storeOpts)
	if err != nil {
		return fail("open store", err)
	}
	undo = append(undo, quiet(st.Close))
	if err := st.Migrate(ctx); err != nil {
		return fail("migrate store", err)
	}
	env.Store = st

	ncfg := opts.NATS
	ncfg.Port = -1
	if ncfg.ReadyTimeout == 0 {
		ncfg.ReadyTimeout = 10 * time.Second
	}
	srv, err := embeddednats.Start(ncfg)
	if err != nil {
		return fail("start nats server", err)
	}
	undo = append(undo, quiet(srv.Shutdown))
	env.Server = srv
	env.URL = srv.ClientURL()

	bnc, err := srv.Connect(nats.Name("comb-bridge"))
	if err != nil {
		return fail("bridge connection", err)
	}
	undo = append(undo, quiet(bnc.Close))
	br, err := bridge.New(bnc, st, opts.Bridge, opts.Logger)
	if err != nil {
		return fail("new bridge", err)
	}
	if err := br.Start(ctx); err != nil {
		return fail("start bridge", err)
	}
	undo = append(undo, quiet(br.Stop))
	env.Bridge = br

	nc, err := nats.Connect(env.URL, nats.Name("comb-test-client"), nats.MaxReconnects(0))
	if err != nil {
		return fail("client connection", err)
	}
	undo = append(undo, quiet(nc.Close))
	env.NC = nc
	return env, stop, nil
}

// AddBridge starts another bridge on env's NATS server and PostgreSQL
// schema, with its own store and connection, as a second broker process
// would; it stops in t.Cleanup.
func AddBridge(t testing.TB, env *Env, cfg bridge.Config) *bridge.Bridge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, env.PostgresURL, store.Options{})
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
