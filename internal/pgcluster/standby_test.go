package pgcluster

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A standby made by StartStandby replays the primary's writes, is
// read-only, counts as synchronous when the primary names it so, and
// after the primary is gone and Promote, takes writes of its own.
func TestStandbyPromote(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	settings := TestSettings()
	settings["synchronous_standby_names"] = "*"
	primary := start(t, filepath.Join(root, "primary"), settings)
	execSQL(t, primary.URL(), `CREATE TABLE t (n int)`)

	standby, err := StartStandby(t.Context(), primary, Options{Dir: filepath.Join(root, "standby"),
		Settings: TestSettings(), Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, standby.Stop()) })
	require.NotEqual(t, primary.Port(), standby.Port())
	require.Equal(t, 1, query(t, standby.URL(), `SELECT pg_is_in_recovery()::int`))

	// With the standby synchronous and remote_apply, a commit on the
	// primary returns only once the standby has applied it (with "on" it
	// returns once the standby flushed it, and a read there may come
	// before the replay: CI saw 0 rows so).
	require.Eventually(t, func() bool {
		return query(t, primary.URL(), `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`) == 1
	}, 30*time.Second, 50*time.Millisecond, "the standby never became synchronous")
	execSQL(t, primary.URL(), `SET synchronous_commit = remote_apply; INSERT INTO t SELECT generate_series(1, 100)`)
	require.Equal(t, 100, query(t, standby.URL(), `SELECT count(*)::int FROM t`))

	require.NoError(t, primary.Kill())
	require.NoError(t, standby.Promote(t.Context()))
	require.Equal(t, 0, query(t, standby.URL(), `SELECT pg_is_in_recovery()::int`))
	execSQL(t, standby.URL(), `INSERT INTO t VALUES (101)`)
	require.Equal(t, 101, query(t, standby.URL(), `SELECT count(*)::int FROM t`))

	_, err = StartStandby(t.Context(), primary, Options{Dir: standby.Dir()})
	require.ErrorContains(t, err, "already holds a cluster")
}
