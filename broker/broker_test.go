package broker

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

// testConfig is a broker on its own schema with random ports.
func testConfig(t *testing.T) Config {
	t.Helper()
	url, drop, err := pgtest.Schema(t.Context(), t.Name())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, drop(context.Background())) })
	c := DefaultConfig()
	c.Postgres.URL = url
	c.NATS.Host, c.NATS.Port = "127.0.0.1", -1
	c.NATS.HTTPPort = embeddednats.NoMonitoring
	return c
}

func start(t *testing.T, c Config) *Broker {
	t.Helper()
	b, err := Start(t.Context(), c, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	return b
}

// info asks for a queue's figures over NATS.
func info(t *testing.T, nc *nats.Conn, subject string) (messages int) {
	t.Helper()
	m, err := nc.Request(subject, nil, 10*time.Second)
	require.NoError(t, err)
	var rep struct {
		Messages int `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &rep), string(m.Data))
	return rep.Messages
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	c.Bridge.Prefix = "tst"
	b := start(t, c)
	require.Equal(t, c.Postgres.URL, b.PostgresURL())
	require.Empty(t, b.MonitorURL())
	require.Equal(t, "tst", b.Prefix())
	require.NotNil(t, b.Store())
	require.NotNil(t, b.Bridge())
	require.NotNil(t, b.Server())

	nc, err := nats.Connect(b.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Request("tst.put.q", []byte("hello"), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, info(t, nc, "tst.info.q"))

	b.Stop()
	b.Stop() // safe twice
	_, err = nc.Request("tst.info.q", nil, 200*time.Millisecond)
	require.Error(t, err)
}

// TestSweeperRuns: the broker sweeps, so retention takes effect in tests
// as it does under `comb serve`.
func TestSweeperRuns(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	c.SweepInterval = 50 * time.Millisecond
	b := start(t, c)
	nc, err := nats.Connect(b.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Request("comb.configure.old", []byte(`{"max_age_s":1}`), 10*time.Second)
	require.NoError(t, err)
	_, err = nc.Request("comb.put.old", []byte("x"), 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return info(t, nc, "comb.info.old") == 0 }, 20*time.Second, 100*time.Millisecond,
		"max_age_s removed the message")
}

// TestStartWithFileUsers: with a users list in the file, the bridge gets
// in as Comb's own user, the file's users get answers, and strangers are
// refused.
func TestStartWithFileUsers(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	_, err := c.LoadFile(writeFile(t, `
authorization { users: [ { user: app, password: pw, permissions: { publish: ["comb.>"], subscribe: ["_INBOX.>"] } } ] }
comb { prefix: comb }
`))
	require.NoError(t, err)
	b := start(t, c)
	require.Len(t, c.NATS.Options.Users, 1, "Start does not change the caller's options")

	_, err = nats.Connect(b.ClientURL(), nats.MaxReconnects(0))
	require.Error(t, err, "a client without credentials is refused")
	nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("app", "pw"))
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Request("comb.put.q", []byte("hello"), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, info(t, nc, "comb.info.q"))
}

func TestStartFailsCleanly(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	c.SweepInterval = 0
	_, err := Start(t.Context(), c, nil)
	require.ErrorContains(t, err, "-sweep-interval")

	c = testConfig(t)
	c.Postgres.URL = "postgres://nobody@127.0.0.1:1/comb?connect_timeout=5"
	_, err = Start(t.Context(), c, nil)
	require.ErrorContains(t, err, "127.0.0.1:1")
}

// testLogger writes the broker's log into the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
