package pgcluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A postmaster killed by someone else comes back by itself, on the same
// port, with its data; a Restart in between is not mistaken for a crash.
func TestSuperviseRestartsACrashedServer(t *testing.T) {
	t.Parallel()
	c := start(t, filepath.Join(t.TempDir(), "data"), nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.Supervise(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	execSQL(t, c.URL(), "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")
	// A Restart asked for is not a crash: the supervisor leaves it alone.
	require.NoError(t, c.Restart(t.Context(), false))
	require.Equal(t, 7, query(t, c.URL(), "SELECT n FROM kept"))

	for round := range 2 {
		c.mu.Lock()
		old := c.proc
		c.mu.Unlock()
		require.NotNil(t, old)
		require.NoError(t, old.cmd.Process.Kill(), "round %d", round) // SIGKILL, as the OOM killer would
		<-old.done
		require.Eventually(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.proc != nil && c.proc != old
		}, 60*time.Second, 20*time.Millisecond, "round %d: restarted", round)
		require.Equal(t, 7, query(t, c.URL(), "SELECT n FROM kept"), "round %d: the data survived", round)
	}
}
