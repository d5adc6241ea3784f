package embeddednats

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, f func() (*nats.Conn, error)) *nats.Conn {
	t.Helper()
	nc, err := f()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func TestRequestReply(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	s := start(t, Config{Port: -1, HTTPPort: -1, ServerName: "comb-test",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.True(t, strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:"), s.ClientURL())
	// A random port, not the default: "nats://127.0.0.1:42229" is one.
	require.NotEqual(t, "nats://127.0.0.1:4222", s.ClientURL())
	require.Contains(t, logs.String(), "Starting nats-server")
	require.Contains(t, logs.String(), "nats server ready")

	inproc := connect(t, func() (*nats.Conn, error) { return s.Connect(nats.Name("bridge")) })
	tcp := connect(t, func() (*nats.Conn, error) { return nats.Connect(s.ClientURL()) })
	require.Equal(t, int64(DefaultMaxPayload), tcp.MaxPayload())

	// A 1 MiB message each way: the default max payload must allow it.
	big := bytes.Repeat([]byte("x"), 1<<20)
	sub, err := inproc.Subscribe("svc.echo", func(m *nats.Msg) {
		_ = m.Respond(append([]byte("echo:"), m.Data...))
	})
	require.NoError(t, err)
	require.NoError(t, inproc.Flush())
	for _, msg := range [][]byte{[]byte("hi"), big} {
		reply, err := tcp.Request("svc.echo", msg, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, append([]byte("echo:"), msg...), reply.Data)
	}
	require.NoError(t, sub.Unsubscribe())

	// And the other way round: a TCP responder, an in-process requester.
	_, err = tcp.Subscribe("svc.upper", func(m *nats.Msg) { _ = m.Respond(bytes.ToUpper(m.Data)) })
	require.NoError(t, err)
	require.NoError(t, tcp.Flush())
	reply, err := inproc.Request("svc.upper", []byte("abc"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "ABC", string(reply.Data))

	// Monitoring answers on its random port.
	require.NotEmpty(t, s.MonitorURL())
	resp, err := http.Get(s.MonitorURL() + "/varz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	s.Shutdown()
	s.Shutdown() // safe twice
	require.False(t, s.NATS().Running())
	require.Contains(t, logs.String(), "nats server stopped")
	_, err = tcp.Request("svc.upper", []byte("abc"), 100*time.Millisecond)
	require.Error(t, err)
}

func TestDontListen(t *testing.T) {
	t.Parallel()
	s := start(t, Config{DontListen: true})
	nc := connect(t, func() (*nats.Conn, error) { return s.Connect() })
	_, err := nc.Subscribe("x", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(t, err)
	reply, err := nc.Request("x", []byte("1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "1", string(reply.Data))
	require.Nil(t, s.NATS().Addr())
}

func TestAuth(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Port: -1, Username: "comb", Password: "secret"})
	connect(t, func() (*nats.Conn, error) { return s.Connect() })
	_, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0))
	require.Error(t, err, "a client without credentials is refused")
	connect(t, func() (*nats.Conn, error) { return nats.Connect(s.ClientURL(), nats.UserInfo("comb", "secret")) })

	_, err = Start(Config{Port: -1, Username: "comb"})
	require.ErrorContains(t, err, "username and password")
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Port: -1})
	port := a.NATS().Addr().(*net.TCPAddr).Port

	began := time.Now()
	_, err := Start(Config{Port: port, ReadyTimeout: time.Minute})
	require.ErrorContains(t, err, "listening on port")
	require.Less(t, time.Since(began), 10*time.Second, "a listen error must fail fast, not wait out the timeout")
}

func TestCluster(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Port: -1, ServerName: "a", Cluster: ClusterConfig{Name: "comb", Port: -1}})
	route := fmt.Sprintf("nats-route://127.0.0.1:%d", a.NATS().ClusterAddr().Port)
	b := start(t, Config{Port: -1, ServerName: "b", Cluster: ClusterConfig{Name: "comb", Port: -1, Routes: []string{route}}})

	na := connect(t, func() (*nats.Conn, error) { return a.Connect() })
	nb := connect(t, func() (*nats.Conn, error) { return b.Connect() })
	_, err := na.Subscribe("on.a", func(m *nats.Msg) { _ = m.Respond([]byte("from a")) })
	require.NoError(t, err)
	require.NoError(t, na.Flush())
	// The route and its interest propagation take a moment: retry, bounded.
	require.Eventually(t, func() bool {
		reply, err := nb.Request("on.a", nil, 200*time.Millisecond)
		return err == nil && string(reply.Data) == "from a"
	}, 10*time.Second, 50*time.Millisecond)

	_, err = Start(Config{Port: -1, Cluster: ClusterConfig{Port: -1}})
	require.ErrorContains(t, err, "needs a name")
}

func TestLameDuck(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Port: -1, LameDuckDuration: 300 * time.Millisecond, LameDuckGracePeriod: 50 * time.Millisecond})
	closed := make(chan struct{})
	nc := connect(t, func() (*nats.Conn, error) {
		return nats.Connect(s.ClientURL(), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	})
	require.NoError(t, nc.Flush())
	done := make(chan struct{})
	go func() { s.LameDuck(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("lame duck did not finish")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("client not disconnected")
	}
	s.Shutdown() // no-op after LameDuck
}

// fileOptions reads a nats-server configuration the way a -config file is
// read.
func fileOptions(t *testing.T, body string) *server.Options {
	t.Helper()
	o := &server.Options{}
	require.NoError(t, o.ProcessConfigString(body))
	return o
}

// TestOptionsBase: the file's options are the base, Config's fields
// override them where set, and Comb's defaults fill the rest.
func TestOptionsBase(t *testing.T) {
	t.Parallel()
	o, err := Config{}.options()
	require.NoError(t, err)
	require.Equal(t, DefaultHost, o.Host)
	require.Equal(t, DefaultPort, o.Port)
	require.Equal(t, int32(DefaultMaxPayload), o.MaxPayload)
	require.Equal(t, int64(DefaultMaxPending), o.MaxPending)
	require.Equal(t, DefaultLameDuckDuration, o.LameDuckDuration)
	require.Equal(t, DefaultLameDuckGracePeriod, o.LameDuckGracePeriod)
	require.Zero(t, o.HTTPPort)
	require.True(t, o.NoSigs)

	file := fileOptions(t, "listen: 0.0.0.0:4333\nmax_payload: 1MB\nhttp_port: 9222\nserver_name: from-file\n"+
		"lame_duck_duration: \"30s\"\ncluster { name: c, listen: 127.0.0.1:6333 }\n")
	o, err = Config{Options: file}.options()
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0", o.Host)
	require.Equal(t, 4333, o.Port)
	require.Equal(t, int32(1<<20), o.MaxPayload)
	require.Equal(t, 9222, o.HTTPPort)
	require.Equal(t, DefaultHost, o.HTTPHost, "monitoring on loopback, though clients listen on every interface")
	require.Equal(t, "from-file", o.ServerName)
	require.Equal(t, 30*time.Second, o.LameDuckDuration)
	require.Equal(t, "c", o.Cluster.Name)
	require.True(t, o.NoSigs, "Comb handles signals, whatever the file says")

	o, err = Config{Options: file, Host: "127.0.0.1", Port: -1, MaxPayload: 2048, HTTPPort: NoMonitoring,
		ServerName: "flag", Cluster: ClusterConfig{Name: "d"}}.options()
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", o.Host)
	require.Equal(t, -1, o.Port)
	require.Equal(t, int32(2048), o.MaxPayload)
	require.Zero(t, o.HTTPPort, "NoMonitoring turns the file's monitoring off")
	require.Equal(t, "flag", o.ServerName)
	require.Equal(t, "d", o.Cluster.Name)
	require.Equal(t, 6333, o.Cluster.Port, "the file's route listener stays")
	require.Equal(t, 4333, file.Port, "the file's options are not changed")

	// The file's http names the monitoring host: that one applies.
	o, err = Config{Options: fileOptions(t, "listen: 127.0.0.1:4333\nhttp: 0.0.0.0:9222\n")}.options()
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0", o.HTTPHost)
	require.Equal(t, 9222, o.HTTPPort)
}

// TestAuthFromOptions: the in-process connection gets past every kind of
// authentication a file can configure, and other clients still need
// their credentials.
func TestAuthFromOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		conf  string
		login nats.Option
	}{
		"token":       {"authorization { token: t0ken }", nats.Token("t0ken")},
		"single user": {"authorization { user: alice, password: s3cret }", nats.UserInfo("alice", "s3cret")},
		"users list": {"authorization { users: [ {user: a, password: pa}, {user: b, password: pb, " +
			"permissions: {publish: \"x.>\", subscribe: \"_INBOX.>\"}} ], default_permissions: { publish: \"nothing\" } }",
			nats.UserInfo("b", "pb")},
		"account users": {"accounts { APP: { users: [ {user: a, password: pa} ] } }", nats.UserInfo("a", "pa")},
		// bcrypt of "pw", cost 4: the broker cannot send a hash, so it
		// gets in as a user of its own.
		"bcrypt user": {"authorization { user: alice, password: \"$2a$04$eKpWIlefc27RLFmz4XMRZe0JAtsoYTvKh2/2wpGf5x1P9kIUagFLe\" }",
			nats.UserInfo("alice", "pw")},
		"bcrypt token": {"authorization { token: \"$2a$04$eKpWIlefc27RLFmz4XMRZe0JAtsoYTvKh2/2wpGf5x1P9kIUagFLe\" }",
			nats.Token("pw")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts := fileOptions(t, tc.conf)
			s := start(t, Config{Port: -1, Options: opts})
			inproc := connect(t, func() (*nats.Conn, error) { return s.Connect() })
			_, err := inproc.Subscribe("x.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
			require.NoError(t, err)
			require.NoError(t, inproc.Flush())

			_, err = nats.Connect(s.ClientURL(), nats.MaxReconnects(0))
			require.Error(t, err, "a client without credentials is refused")
			if tc.login == nil {
				return
			}
			nc := connect(t, func() (*nats.Conn, error) { return nats.Connect(s.ClientURL(), tc.login) })
			if name == "account users" {
				return // another account: it does not see the global account's subjects
			}
			reply, err := nc.Request("x.echo", []byte("hi"), 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, "hi", string(reply.Data))
		})
	}
}
