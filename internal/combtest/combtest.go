// Package combtest starts a whole Comb for a test: a fresh PostgreSQL
// schema with the store migrated, an embedded NATS server on a random port,
// and a bridge serving the protocol on it. Tests of the bridge, the
// clients and the loader talk to it over NATS like any client would.
//
// The test binary's TestMain must start PostgreSQL through pgtest:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }
package combtest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/store"
)

// Env is a running Comb. Everything in it stops in t.Cleanup.
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

// StartWith starts a Comb for t: a store on a fresh schema (migrated), an
// embedded NATS server on a random port, and a bridge on an in-process
// connection to it.
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	env := &Env{PostgresURL: pgtest.URL(t)}
	storeOpts := opts.Store
	if storeOpts.Logger == nil {
		storeOpts.Logger = opts.Logger
	}
	st, err := store.Open(ctx, env.PostgresURL, storeOpts)
	require.NoError(t, err, "open store")
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx), "migrate store")
	env.Store = st

	ncfg := opts.NATS
	ncfg.Port = -1
	if ncfg.ReadyTimeout == 0 {
		ncfg.ReadyTimeout = 10 * time.Second
	}
	srv, err := embeddednats.Start(ncfg)
	require.NoError(t, err, "start nats server")
	t.Cleanup(srv.Shutdown)
	env.Server = srv
	env.URL = srv.ClientURL()

	bnc, err := srv.Connect(nats.Name("comb-bridge"))
	require.NoError(t, err, "bridge connection")
	t.Cleanup(bnc.Close)
	br, err := bridge.New(bnc, st, opts.Bridge, opts.Logger)
	require.NoError(t, err, "new bridge")
	require.NoError(t, br.Start(ctx), "start bridge")
	t.Cleanup(br.Stop)
	env.Bridge = br

	nc, err := nats.Connect(env.URL, nats.Name("comb-test-client"), nats.MaxReconnects(0))
	require.NoError(t, err, "client connection")
	t.Cleanup(nc.Close)
	env.NC = nc
	return env
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
