package loadtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/internal/testenv"
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
	cfg.Report = false // drawn in the smoke test; slow under -race

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
		for _, f := range []string{"summary.json", "intervals.csv", "samples.csv"} {
			_, err := os.Stat(filepath.Join(cfg.OutDir, r.Label, f))
			require.NoError(t, err, "%s/%s", r.Label, f)
		}
	}
	require.Contains(t, out.String(), "[compare]")
	_, err = os.Stat(filepath.Join(cfg.OutDir, "summary.json"))
	require.NoError(t, err)
}

// TestInterrupt cancels a run early, as Ctrl-C does: it must stop soon,
// still drain, print its final figures and write its files.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Targets = []Target{TargetJetStream}
	cfg.JetStreamSyncs = []JetStreamSync{SyncDefault}
	cfg.Rate = 200
	cfg.PushBatch = 10
	cfg.Partitions = 2
	cfg.Consumers = 2
	cfg.Pacers = 1
	cfg.Conns = 1
	cfg.Duration = time.Minute
	cfg.Interval = time.Second
	cfg.Verify = true
	cfg.OutDir = t.TempDir()
	cfg.Report = false

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.Buffer{}
	done := make(chan struct{})
	var sum Summary
	var err error
	start := time.Now()
	go func() {
		defer close(done)
		sum, err = Run(ctx, cfg, out)
	}()
	// Interrupt once the first interval line is out.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "[     1s]") {
		require.True(t, time.Now().Before(deadline), "no interval line: %s", out.String())
		select {
		case <-done:
			t.Fatalf("run ended before the interrupt: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	// Stopping waits for pushes in flight (bounded by their timeout), a
	// drain of at most 5 s, the acks and the report: generous bounds, so
	// that a loaded CI machine running tests in parallel does not fail it.
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("run did not stop after its context was cancelled")
	}
	require.Less(t, time.Since(start), 50*time.Second, "well before the minute the run was planned for")
	require.NoError(t, err)
	require.Len(t, sum.Runs, 1)
	r := sum.Runs[0]
	require.True(t, r.Interrupted)
	require.Less(t, r.Elapsed, 30.0)
	require.True(t, r.Verdict.OK(), "%+v", r.Verdict)
	require.Contains(t, out.String(), "[final jetstream-default] interrupted")
	for _, f := range []string{"summary.json", "intervals.csv", "samples.csv"} {
		_, err := os.Stat(filepath.Join(cfg.OutDir, f))
		require.NoError(t, err, f)
	}
}
