package loadtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJetStreamRun runs a few seconds of a tiny workload against the
// embedded JetStream, with both sync policies and verification, and checks
// the figures add up and the files are written. No throughput assertion.
func TestJetStreamRun(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Targets = []Target{TargetJetStream}
	cfg.JetStreamSyncs = []JetStreamSync{SyncDefault, SyncAlways}
	cfg.Rate = 400
	cfg.PushBatch = 10
	cfg.Partitions = 4
	cfg.Consumers = 2
	cfg.Pacers = 2
	cfg.Conns = 1
	cfg.Duration = 2 * time.Second
	cfg.Interval = time.Second
	cfg.Drain = 10 * time.Second
	cfg.Verify = true
	cfg.OutDir = t.TempDir()

	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.Len(t, sum.Runs, 2)
	for _, r := range sum.Runs {
		require.True(t, r.Verdict.OK(), "%s: %+v", r.Label, r.Verdict)
		require.Positive(t, r.Counts.Pushed, r.Label)
		require.Equal(t, r.Counts.Pushed, r.Verdict.Stored, r.Label)
		require.Zero(t, r.Verdict.Missing, r.Label)
		for _, f := range []string{"summary.json", "intervals.csv", "samples.csv", "report.png"} {
			_, err := os.Stat(filepath.Join(cfg.OutDir, r.Label, f))
			require.NoError(t, err, "%s/%s", r.Label, f)
		}
	}
	require.Contains(t, out.String(), "[compare]")
	_, err = os.Stat(filepath.Join(cfg.OutDir, "summary.json"))
	require.NoError(t, err)
}
