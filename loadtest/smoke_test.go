package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/loadtest"
)

// TestSmokeVerify is CI's smoke run: about ten seconds of a light open-loop
// load on a real Comb (PostgreSQL, embedded NATS, the bridge) with
// per-message verification. It fails when a message is missing or out of
// order, or when the loader breaks; it asserts no throughput.
func TestSmokeVerify(t *testing.T) {
	t.Parallel()
	// The loader's lean client for the whole ten seconds, and clients/go
	// for a shorter run alongside, so that both stay honest.
	for _, tc := range []struct {
		client   loadtest.Client
		duration time.Duration
	}{
		{loadtest.ClientRaw, 10 * time.Second},
		{loadtest.ClientGo, 4 * time.Second},
	} {
		t.Run(string(tc.client), func(t *testing.T) {
			t.Parallel()
			smoke(t, tc.client, tc.duration)
		})
	}
}

func smoke(t *testing.T, client loadtest.Client, duration time.Duration) {
	env := combtest.Start(t)

	cfg := loadtest.DefaultConfig()
	cfg.NATSURL = env.URL
	cfg.PostgresURL = env.PostgresURL
	cfg.Queue = "smoke"
	cfg.Rate = 2000
	cfg.PushBatch = 50
	cfg.Partitions = 8
	cfg.Consumers = 4
	cfg.Pacers = 2
	cfg.Conns = 2
	cfg.Client = client
	cfg.Duration = duration
	cfg.Interval = 5 * time.Second
	cfg.Drain = 30 * time.Second
	cfg.Verify = true
	cfg.OutDir = t.TempDir()
	// One report is enough to keep it drawn; it costs seconds under -race.
	cfg.Report = client == loadtest.ClientRaw

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	sum, err := loadtest.Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.Len(t, sum.Runs, 1)
	r := sum.Runs[0]
	v := r.Verdict
	require.True(t, v.Checked)
	require.Zero(t, v.Missing, "missing messages")
	require.Zero(t, v.OrderViolations, "order violations")
	require.Zero(t, v.Unknown)
	require.Positive(t, v.Stored)
	require.Equal(t, r.Counts.Pushed, v.Stored)
	require.Equal(t, v.Stored+v.FailedDelivered, v.Delivered, "everything stored was delivered, nothing else of this run")
	require.Zero(t, v.Unanswered)
	require.Positive(t, r.Latency.Count)

	files := []string{"summary.json", "intervals.csv", "samples.csv"}
	if cfg.Report {
		files = append(files, "report.png")
	}
	for _, f := range files {
		_, err := os.Stat(filepath.Join(cfg.OutDir, f))
		require.NoError(t, err, f)
	}
	var back loadtest.Result
	b, err := os.ReadFile(filepath.Join(cfg.OutDir, "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r.Counts, back.Counts)
	require.Contains(t, out.String(), "[verify comb] OK")
}
