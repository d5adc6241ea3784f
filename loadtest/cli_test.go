package loadtest_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/internal/cli"
)

// runCLI runs `comb loadtest args…` with env as the environment.
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	exited := -1
	e := cli.Env{
		Stdout: &stdout,
		Stderr: &stderr,
		Getenv: func(k string) string { return env[k] },
		Exit:   func(code int) { exited = code },
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := cli.Run(ctx, e, append([]string{"loadtest"}, args...))
	require.Equal(t, -1, exited, "no second signal, no hard exit")
	return code, stdout.String(), stderr.String()
}

func TestCLI(t *testing.T) {
	t.Parallel()

	code, _, stderr := runCLI(t, nil, "-h")
	require.Zero(t, code)
	require.Contains(t, stderr, "-push-batch, $COMB_PUSH_BATCH")
	require.Contains(t, stderr, "-verify, $COMB_VERIFY")
	require.Contains(t, stderr, "-dedup-window, $COMB_DEDUP_WINDOW")

	code, _, stderr = runCLI(t, nil, "-dedup-window", "1500ms")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "dedup-window 1.5s: want a whole number of seconds")

	code, _, stderr = runCLI(t, nil, "-mode", "bogus")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `mode "bogus"`)

	code, _, _ = runCLI(t, nil, "-no-such-flag")
	require.Equal(t, 2, code)

	code, _, stderr = runCLI(t, map[string]string{"COMB_RATE": "many"})
	require.Equal(t, 2, code, "a bad environment twin is bad usage")
	require.Contains(t, stderr, "COMB_RATE")

	// A tiny verified run against the embedded JetStream; the rate comes
	// from the environment and the flag wins over its twin. Deduplication
	// on: every message carries a Nats-Msg-Id, none is a duplicate.
	code, stdout, stderr := runCLI(t, map[string]string{"COMB_RATE": "200", "COMB_PAYLOAD": "999999999", "COMB_DEDUP_WINDOW": "10s"},
		"-target", "jetstream", "-jetstream-sync", "always", "-payload", "128",
		"-push-batch", "10", "-partitions", "2", "-consumers", "1", "-pacers", "1", "-conns", "1",
		"-duration", "1s", "-interval", "1s", "-verify")
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "rate=200 msg/s")
	require.Contains(t, stdout, "payload=128B")
	require.Contains(t, stdout, "[verify jetstream-always] OK")
	require.Contains(t, stdout, "dedup-window=10s")
	require.Contains(t, stdout, "Nats-Msg-Id on every message with a 10s duplicate window")
	require.NotContains(t, stdout, "duplicate answers")
}
