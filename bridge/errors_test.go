package bridge_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/freeport"
	"github.com/combmq/comb/internal/testenv"
	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/store"
)

// TestUnavailableReplyNamesNoHost: with PostgreSQL down, a push is
// answered 503 "postgresql unavailable" with a request id, and the reply
// names no host, port, user or database; the log line under that id has
// the detail.
func TestUnavailableReplyNamesNoHost(t *testing.T) {
	t.Parallel()
	p, err := freeport.Loopback()
	require.NoError(t, err)
	port := strconv.Itoa(p) // nothing listens there
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, "postgres://someuser:sekrit@127.0.0.1:"+port+"/somedb?connect_timeout=2", store.Options{})
	require.NoError(t, err)
	t.Cleanup(st.Close)

	srv, err := embeddednats.Start(embeddednats.Config{DontListen: true, HTTPPort: embeddednats.NoMonitoring})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	bnc, err := srv.Connect(nats.Name("bridge"))
	require.NoError(t, err)
	t.Cleanup(bnc.Close)
	var logs testenv.Buffer
	br, err := bridge.New(bnc, st, bridge.Config{RequestTimeout: 10 * time.Second}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.NoError(t, br.Start(ctx))
	t.Cleanup(br.Stop)
	nc, err := srv.Connect(nats.Name("client"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	for subject, body := range map[string]string{"comb.put.q": "hello", "comb.push.q": `{"messages":[{"data":"x"}]}`, "comb.info.q": "",
		"comb.txn": `{"acks":[{"queue":"q","offset":0,"lease":"l-1-a"}],"push":[{"queue":"r","messages":[{"data":"x"}]}]}`} {
		m := request(t, nc, subject, body)
		requireError(t, m, protocol.CodeUnavailable, "postgresql unavailable")
		msg := m.Header.Get("Nats-Service-Error")
		for _, secret := range []string{"127.0.0.1", port, "someuser", "somedb", "sekrit", "postgres://", "dial"} {
			require.NotContains(t, string(m.Data), secret, subject)
			require.NotContains(t, msg, secret, subject)
		}
		_, id, ok := strings.Cut(msg, "request id ")
		require.True(t, ok, msg)
		require.NotEmpty(t, id)
		require.Eventually(t, func() bool {
			for line := range strings.SplitSeq(logs.String(), "\n") {
				if strings.Contains(line, "request_id="+id) && strings.Contains(line, "127.0.0.1:"+port) {
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "the log has the detail under the id:\n%s", logs.String())
		require.NotContains(t, logs.String(), "sekrit", "pgx names no password")
	}
}

// TestTimedOutReplySaysSo: a store call that outlives request_timeout
// (here a seek waiting for a lock on its group's row) is answered 503
// "timed out waiting for PostgreSQL after …", naming the setting and a
// request id, not "postgresql unavailable": PostgreSQL answered all along.
func TestTimedOutReplySaysSo(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RequestTimeout: 500 * time.Millisecond}})
	nc := env.NC
	call(t, nc, "comb.configure.slow", ``, nil)
	pop(t, nc, "slow", `{"group":"g"}`)
	tx, err := env.Store.Pool().Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM comb_groups WHERE name = 'g' FOR UPDATE`)
	require.NoError(t, err)

	m := request(t, nc, "comb.seek.slow", `{"group":"g","to":"start"}`)
	requireError(t, m, protocol.CodeUnavailable, "timed out waiting for PostgreSQL after 500ms (request_timeout), retry later, request id ")
}
