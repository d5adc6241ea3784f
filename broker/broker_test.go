package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

// testConfig is a broker on its own schema with random ports.
func testConfig(t testing.TB) Config {
	t.Helper()
	url, drop, err := pgtest.Schema(t.Context(), t.Name())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, drop(context.Background())) })
	c := DefaultConfig()
	c.Postgres.URL = url
	c.DataDir = t.TempDir() // the spool's, one each
	c.NATS.Host, c.NATS.Port = "127.0.0.1", -1
	c.NATS.HTTPPort = embeddednats.NoMonitoring
	c.HTTP = "127.0.0.1:0" // tests run in parallel
	// Warming costs a start about half a second of both cores, and the
	// tests start many brokers: TestStartWarmsTheStore covers it.
	c.Postgres.Warm = false
	return c
}

// TestStartWarmsTheStore: with pg_warm (the default of `comb serve`), a
// broker opens its pools' connections, as many as its workers use, and
// readies them before it serves, and says so; without it, it does not.
func TestStartWarmsTheStore(t *testing.T) {
	t.Parallel()
	require.True(t, DefaultConfig().Postgres.Warm)
	for _, warm := range []bool{true, false} {
		t.Run(fmt.Sprint("warm=", warm), func(t *testing.T) {
			t.Parallel()
			c := testConfig(t)
			c.Postgres.Warm = warm
			log := &testenv.Buffer{}
			b, err := Start(t.Context(), c, slog.New(slog.NewTextHandler(log, nil)))
			require.NoError(t, err)
			t.Cleanup(b.Stop)
			warmed := strings.Contains(log.String(), `msg="store connections warmed"`)
			require.Equal(t, warm, warmed, "%s", log.String())
			if !warm {
				return
			}
			want := map[string]int32{"main": 4 + 2 + 2, "pop": 8}
			for _, p := range b.st.PoolStats() {
				require.GreaterOrEqual(t, p.Stat.TotalConns(), want[p.Name], "the %s pool", p.Name)
			}
		})
	}
}

func getReady(t *testing.T, base string) (int, readiness) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var rd readiness
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rd))
	return resp.StatusCode, rd
}

// The HTTP listener serves /healthz on the port it bound, loopback by
// default, and is off when empty.
func TestHTTPListener(t *testing.T) {
	t.Parallel()
	require.Equal(t, "127.0.0.1:8480", DefaultConfig().HTTP)
	b := start(t, testConfig(t))
	u := b.HTTPURL()
	require.Regexp(t, `^http://127\.0\.0\.1:\d+$`, u)
	resp, err := http.Get(u + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok\n", string(body))

	// /readyz: ready with every check ok; once PostgreSQL is unreachable,
	// 503 naming the check and nothing about where PostgreSQL is.
	code, rd := getReady(t, u)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]string{"broker": "ok", "nats": "ok", "postgresql": "ok", "maintenance": "ok", "spool": "ok"}, rd.Checks)
	require.True(t, rd.Ready)
	require.NotNil(t, rd.Spool)
	require.EqualValues(t, DefaultSpoolMaxBytes, rd.Spool.MaxBytes)

	// Maintenance: not ready, and PostgreSQL is not even pinged.
	b.Bridge().SetMaintenance(true)
	code, rd = getReady(t, u)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.True(t, rd.Maintenance)
	require.Equal(t, map[string]string{"broker": "ok", "nats": "ok", "postgresql": "not checked in maintenance", "maintenance": "on", "spool": "ok"}, rd.Checks)
	b.Bridge().SetMaintenance(false)

	b.st.Close() // as good as an unreachable PostgreSQL, for this broker
	code, rd = getReady(t, u)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.False(t, rd.Ready)
	require.Equal(t, map[string]string{"broker": "ok", "nats": "ok", "postgresql": "unreachable", "maintenance": "ok", "spool": "ok"}, rd.Checks)

	c := testConfig(t)
	c.HTTP = ""
	require.Empty(t, start(t, c).HTTPURL())

	c.HTTP = "nowhere"
	require.ErrorContains(t, c.Validate(), `-http "nowhere": want host:port`)
}

func start(t testing.TB, c Config) *Broker {
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
	c.Postgres.StartWait = 0
	_, err = Start(t.Context(), c, nil)
	require.ErrorContains(t, err, "127.0.0.1:1")
}

// testLogger writes the broker's log into the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// TestMonitoringLoopbackByDefault: with clients on every interface and no
// host named for monitoring, /varz answers on 127.0.0.1 and on no other
// address of the machine.
func TestMonitoringLoopbackByDefault(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	c.NATS.Host = "0.0.0.0"
	c.NATS.HTTPPort = -1
	b := start(t, c)
	u, err := url.Parse(b.MonitorURL())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname())
	require.Equal(t, "127.0.0.1", b.Server().NATS().MonitorAddr().IP.String(), "bound to loopback, not just shown so")
	resp, err := http.Get(b.MonitorURL() + "/varz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil {
			continue
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), u.Port()), 2*time.Second)
		if err == nil {
			_ = conn.Close()
		}
		require.Error(t, err, "monitoring must not answer on %s", ipn.IP)
	}
}

// TestPprofCmdlineRedacted: the command line pprof serves hides passwords.
func TestPprofCmdlineRedacted(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		"comb", "serve", "-postgres-url", "postgres://u:xxxxx@db:5432/comb",
		"--postgres-url=postgres://u:xxxxx@db/comb", "-nats-token", "xxxxx", "-password=xxxxx",
		"postgres://nopass@db/comb", "-data-dir", "/d",
	}, RedactArgs([]string{
		"comb", "serve", "-postgres-url", "postgres://u:sekrit@db:5432/comb",
		"--postgres-url=postgres://u:sekrit@db/comb", "-nats-token", "sekrit", "-password=sekrit",
		"postgres://nopass@db/comb", "-data-dir", "/d",
	}))
	rec := httptest.NewRecorder()
	redactedCmdline(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/cmdline", nil))
	require.Equal(t, strings.Join(RedactArgs(os.Args), "\x00"), rec.Body.String())
}
