//go:build linux

package faulttest

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/pgcluster"
)

// TestExternalPostgresDownAndBack runs `comb serve` on an external
// PostgreSQL (-postgres-url, a throwaway cluster of the test's own) that
// is down when Comb starts: Comb waits, logging each attempt, and is
// ready once PostgreSQL is up. Then, under load, PostgreSQL is stopped
// for two seconds and started again: pushes are answered 503 meanwhile
// and /readyz says 503, then both recover without a restart of Comb, and
// every message acknowledged is there, once.
func TestExternalPostgresDownAndBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(t.TempDir(), "pg"),
		Settings: pgcluster.TestSettings()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cl.Stop()) })
	require.NoError(t, cl.Stop())

	// Down at start: PostgreSQL comes up once Comb has retried twice.
	b := newBrokerProc(t, cl.URL())
	// Without a spool: this test is about the 503s pops, acks and (spool
	// off or full) pushes get; TestPostgresStoppedSpools has the spool.
	b.args = append(b.args, "-spool-max-bytes", "0")
	firstLog := filepath.Join(b.logDir, "serve-1.log")
	pgUp := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			if logCount(firstLog, `msg="postgresql unreachable, retrying"`) >= 2 {
				pgUp <- cl.Start(ctx)
				return
			}
			time.Sleep(20 * time.Millisecond) // polling a file another process writes
		}
		pgUp <- context.DeadlineExceeded
	}()
	b.start()
	require.NoError(t, <-pgUp)
	require.Equal(t, 1, logCount(firstLog, `msg="postgresql reachable"`))
	base := b.httpURL()
	require.Equal(t, http.StatusOK, readyz(t, base))

	nc, err := nats.Connect(b.url)
	require.NoError(t, err)
	defer nc.Close()
	c := comb.New(nc, comb.WithTimeout(5*time.Second))
	_, err = c.Configure(ctx, "ext", comb.ConfigPatch{DedupWindowS: comb.Int64(600)})
	require.NoError(t, err)
	load := newIDLoad(c, "ext")
	load.start(ctx, t)
	waitFor(t, 20*time.Second, "pushes before the stop", func() bool { return load.okCount() >= 50 })

	// Down under load: 503s, and /readyz says so.
	require.NoError(t, cl.Stop())
	stoppedAt := time.Now()
	// Usually at once; CI has seen the broker answer a few 503s and then
	// nothing at all for longer than its request_timeout (nothing from the
	// store either, not even the sweeper's errors), a stall not understood
	// yet. Should it happen again, the broker's goroutines are dumped into
	// its log, to show where it waits.
	if !eventually(35*time.Second, func() bool { return load.n503.Load() >= 10 }) {
		b.dumpStacks()
		t.Fatalf("not within 35s: 503s while PostgreSQL is down (%d 503s, %d unanswered); the broker's stacks are in its log", load.n503.Load(), load.nLost.Load())
	}
	require.Equal(t, http.StatusServiceUnavailable, readyz(t, base))
	time.Sleep(time.Until(stoppedAt.Add(2 * time.Second))) // stay down a while: the point of the test
	require.NoError(t, cl.Start(ctx))
	startedAt := time.Now()

	waitFor(t, 20*time.Second, "pushes stored again", func() bool { return load.okSince(startedAt) >= 50 })
	waitFor(t, 10*time.Second, "/readyz ready again", func() bool { return readyz(t, base) == http.StatusOK })
	load.halt()
	require.False(t, t.Failed())
	last, first := load.outage(stoppedAt)
	msgs, dups := load.verify(ctx, t)
	t.Logf("%d messages acknowledged and there; %d 503 answers, %d unanswered attempts, %d duplicates answered; "+
		"no push succeeded for %.2f s (PostgreSQL down %.2f s); first push stored %.3f s after PostgreSQL was up",
		msgs, load.n503.Load(), load.nLost.Load(), dups, first.Sub(last).Seconds(),
		startedAt.Sub(stoppedAt).Seconds(), first.Sub(startedAt).Seconds())
	b.interrupt()
}
