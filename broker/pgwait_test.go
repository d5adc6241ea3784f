package broker

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/combmq/comb/internal/freeport"
	"github.com/combmq/comb/internal/testenv"
	"github.com/stretchr/testify/require"
)

// closedPort returns a loopback port nothing listens on: connections to
// it are refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.LoopbackAddr()
	require.NoError(t, err)
	return addr
}

// An unreachable PostgreSQL at start is tried again, each attempt logged,
// until pg_start_wait runs out; 0 fails at the first attempt; a signal
// (ctx) ends the wait early.
func TestStartWaitsForUnreachablePostgres(t *testing.T) {
	t.Parallel()
	pgURL := "postgres://postgres:pw@" + closedPort(t) + "/comb?sslmode=disable"

	c := testConfig(t)
	c.Postgres.URL = pgURL
	c.Postgres.StartWait = 0
	log := &testenv.Buffer{}
	_, err := Start(t.Context(), c, slog.New(slog.NewTextHandler(log, nil)))
	require.ErrorContains(t, err, "postgresql unreachable")
	require.ErrorContains(t, err, "1 attempts")
	require.NotContains(t, log.String(), "retrying")
	require.NotContains(t, err.Error(), ":pw@", "no password in the error")

	c.Postgres.StartWait = 1500 * time.Millisecond
	log = &testenv.Buffer{}
	begin := time.Now()
	_, err = Start(t.Context(), c, slog.New(slog.NewTextHandler(log, nil)))
	took := time.Since(begin)
	require.ErrorContains(t, err, "postgresql unreachable")
	require.ErrorContains(t, err, "-pg-start-wait")
	// Backoff gives up when the next attempt would come after the wait.
	require.GreaterOrEqual(t, took, 500*time.Millisecond, "waited")
	require.Less(t, took, 1500*time.Millisecond+pgAttemptTimeout, "no longer than pg_start_wait and an attempt")
	retries := strings.Count(log.String(), `msg="postgresql unreachable, retrying"`)
	require.GreaterOrEqual(t, retries, 2, "each attempt is logged:\n%s", log.String())
	require.NotContains(t, log.String(), ":pw@", "no password in the log")

	c.Postgres.StartWait = time.Hour
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	begin = time.Now()
	_, err = Start(ctx, c, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(begin), 10*time.Second, "a signal ends the wait")
}

// A PostgreSQL that answers with a refusal waiting will not heal, such as
// a wrong password or a database that does not exist, fails the start at
// once however long pg_start_wait is.
func TestStartFailsFastOnRefusal(t *testing.T) {
	t.Parallel()
	good := testConfig(t).Postgres.URL
	for name, edit := range map[string]func(*url.URL){
		"wrong password":   func(u *url.URL) { u.User = url.UserPassword(u.User.Username(), "wrong") },
		"missing database": func(u *url.URL) { u.Path = "/no_such_db" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(good)
			require.NoError(t, err)
			edit(u)
			c := testConfig(t)
			c.Postgres.URL = u.String()
			c.Postgres.StartWait = time.Hour
			var log testenv.Buffer
			begin := time.Now()
			_, err = Start(t.Context(), c, slog.New(slog.NewTextHandler(&log, nil)))
			require.Error(t, err)
			require.Less(t, time.Since(begin), 10*time.Second)
			require.NotContains(t, log.String(), "retrying")
			t.Logf("%v", err)
		})
	}
}
