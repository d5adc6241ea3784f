//go:build linux

package faulttest

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/pgcluster"
)

// TestFailoverToPromotedStandby runs `comb serve` on a multi-host URL,
// primary first, standby second, with target_session_attrs=read-write,
// under a load of producers that push with producer ids. The standby
// streams from the primary synchronously (synchronous_standby_names), so
// a commit, and so a push answered "stored", is on the standby before the
// answer. The primary is killed (immediate shutdown, as in a crash) and
// the standby promoted with pg_ctl promote: pushes are answered 503 until
// Comb's pool reaches the new primary, then stored there, without a
// restart of Comb. Afterwards every id acknowledged is on the new primary,
// once, at the offset acknowledged.
func TestFailoverToPromotedStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	root := t.TempDir()
	settings := pgcluster.TestSettings()
	// Commits wait for the standby's flush: what the primary
	// acknowledged, the standby has.
	settings["synchronous_standby_names"] = "*"
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(root, "primary"), Settings: settings})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, primary.Stop()) })
	// The standby's own settings name no synchronous standby: once
	// promoted, it has none to wait for.
	standby, err := pgcluster.StartStandby(ctx, primary, pgcluster.Options{Dir: filepath.Join(root, "standby"),
		Settings: pgcluster.TestSettings()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, standby.Stop()) })
	waitFor(t, 30*time.Second, "the standby synchronous", func() bool {
		return queryInt(ctx, t, primary.URL(), `SELECT count(*)::int FROM pg_stat_replication WHERE sync_state = 'sync'`) == 1
	})

	pw, _ := mustURL(t, primary.URL()).User.Password()
	multi := fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d,127.0.0.1:%d/comb?target_session_attrs=read-write&sslmode=disable",
		url.QueryEscape(pw), primary.Port(), standby.Port())
	b := newBrokerProc(t, multi)
	// Without a spool: every acknowledgement here is a store's, so the
	// check on the new primary covers them all.
	b.args = append(b.args, "-spool-max-bytes", "0")
	b.start()

	nc, err := nats.Connect(b.url)
	require.NoError(t, err)
	defer nc.Close()
	c := comb.New(nc, comb.WithTimeout(5*time.Second))
	_, err = c.Configure(ctx, "fo", comb.ConfigPatch{DedupWindowS: comb.Int64(600)})
	require.NoError(t, err)
	load := newIDLoad(c, "fo")
	load.start(ctx, t)
	waitFor(t, 20*time.Second, "pushes before the failover", func() bool { return load.okCount() >= 100 })

	require.NoError(t, primary.Kill())
	killedAt := time.Now()
	require.NoError(t, standby.Promote(ctx))
	promotedAt := time.Now()
	waitFor(t, 30*time.Second, "pushes stored on the new primary", func() bool { return load.okSince(promotedAt) >= 100 })
	load.halt()
	require.False(t, t.Failed())
	require.Positive(t, load.n503.Load()+load.nLost.Load(), "the failover was noticed")
	require.Equal(t, 0, queryInt(ctx, t, standby.URL(), `SELECT pg_is_in_recovery()::int`))

	last, first := load.outage(killedAt)
	msgs, dups := load.verify(ctx, t)
	t.Logf("%d messages acknowledged and there, none lost; %d 503 answers, %d unanswered attempts, "+
		"%d duplicates answered; no push succeeded for %.3f s; the kill to pg_ctl promote returning %.3f s, "+
		"the kill to the first push stored %.3f s",
		msgs, load.n503.Load(), load.nLost.Load(), dups, first.Sub(last).Seconds(),
		promotedAt.Sub(killedAt).Seconds(), first.Sub(killedAt).Seconds())
	b.interrupt()
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func queryInt(ctx context.Context, t *testing.T, pgURL, sql string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
	return n
}
