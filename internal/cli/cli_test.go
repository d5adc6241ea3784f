package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/broker"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/pgtest"
)

func TestMain(m *testing.M) {
	// The serve tests run this binary as `comb`: see startServe.
	if os.Getenv(childEnv) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	// The commands for people run against a whole Comb (combtest), which
	// needs PostgreSQL.
	goleak.VerifyTestMain(pgtest.Wrap(m))
}

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestServeConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe(nil, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, broker.DefaultConfig(), cfg.Config)
	require.Empty(t, cfg.File)
	// Today's defaults: the NATS ones are "unset" in the Config, so that a
	// file can set them, and the broker fills Comb's defaults.
	require.Equal(t, "./comb-data", cfg.DataDir)
	require.Equal(t, 5433, cfg.Postgres.Port)
	require.Equal(t, slog.LevelInfo, cfg.LogLevel)
	require.Equal(t, "comb", cfg.Bridge.Prefix)
	require.Equal(t, time.Second, cfg.SweepInterval)
	require.Empty(t, cfg.Pprof)
	require.Zero(t, cfg.NATS.Port)
	require.Empty(t, cfg.NATS.Host)
}

func TestServeConfigEnvAndFlags(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{
		"COMB_NATS_LISTEN":    "0.0.0.0:0",
		"COMB_NATS_HTTP":      "0",
		"COMB_POSTGRES_URL":   "postgres://u:p@db:5432/comb",
		"COMB_DATA_DIR":       "/var/lib/comb",
		"COMB_PG_PORT":        "6000",
		"COMB_LOG_LEVEL":      "debug",
		"COMB_PREFIX":         "fromenv",
		"COMB_SWEEP_INTERVAL": "250ms",
		"COMB_PUSH_WORKERS":   "7",
		"COMB_BATCH_BYTES":    "2MB",
		"COMB_DURABLE_POPS":   "true",
		"COMB_DURABLE_ACKS":   "true",
		"COMB_ROUTES":         "nats-route://a:6222, nats-route://b:6222",
		"COMB_CLUSTER_NAME":   "shop",
		"COMB_GC_PERCENT":     "250",
		"COMB_MEMORY_LIMIT":   "1GB",
	})
	cfg, err := parseServe(nil, env, io.Discard)
	require.NoError(t, err)
	want := broker.DefaultConfig()
	want.NATS.Host, want.NATS.Port = "0.0.0.0", -1 // port 0 means pick a free one
	want.NATS.HTTPPort = embeddednats.NoMonitoring
	want.Postgres.URL = "postgres://u:p@db:5432/comb"
	want.DataDir = "/var/lib/comb"
	want.Postgres.Port = 6000
	want.LogLevel = slog.LevelDebug
	want.Bridge.Prefix = "fromenv"
	want.SweepInterval = 250 * time.Millisecond
	want.Bridge.PushWorkers = 7
	want.Bridge.BatchBytes = 2 << 20
	want.Postgres.DurablePops = true
	want.Postgres.DurableAcks = true
	want.NATS.Cluster.Routes = []string{"nats-route://a:6222", "nats-route://b:6222"}
	want.NATS.Cluster.Name = "shop"
	want.GCPercent, want.MemoryLimit = 250, 1<<30
	require.Equal(t, want, cfg.Config)

	// A flag wins over its variable, in either spelling.
	cfg, err = parseServe([]string{"-prefix", "fromflag", "--pg-port=7000", "-log-level", "WARN", "-durable-pops=false", "-durable-acks=false"}, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "fromflag", cfg.Bridge.Prefix)
	require.Equal(t, 7000, cfg.Postgres.Port)
	require.False(t, cfg.Postgres.DurablePops)
	require.False(t, cfg.Postgres.DurableAcks)
	require.Equal(t, "/var/lib/comb", cfg.DataDir, "unset flags still come from the environment")
	require.Equal(t, slog.LevelWarn, cfg.LogLevel)
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad env int", nil, map[string]string{"COMB_PG_PORT": "x"}, `COMB_PG_PORT="x"`},
		{"bad flag int", []string{"-nats-http", "x"}, nil, "invalid value"},
		{"unknown flag", []string{"-nope"}, nil, "not defined"},
		{"extra arg", []string{"extra"}, nil, `unexpected argument "extra"`},
		{"listen without port", []string{"-nats-listen", "localhost"}, nil, "-nats-listen"},
		{"listen bad port", []string{"-nats-listen", "localhost:99999"}, nil, "bad port"},
		{"http port", []string{"-nats-http", "-2"}, nil, `invalid value "-2" for flag -nats-http`},
		{"cluster without name", []string{"-cluster-listen", "127.0.0.1:0"}, nil, "a cluster needs a name"},
		{"pg port", nil, map[string]string{"COMB_PG_PORT": "70000"}, "-pg-port 70000"},
		{"empty data dir", []string{"-data-dir", ""}, nil, "-data-dir is empty"},
		{"log level", []string{"-log-level", "loud"}, nil, `"loud"`},
		{"prefix dots", []string{"-prefix", "a.b"}, nil, `-prefix "a.b"`},
		{"prefix wildcard", []string{"-prefix", ">"}, nil, `-prefix ">"`},
		{"postgres url", []string{"-postgres-url", "postgres://h:notaport/db"}, nil, "-postgres-url"},
		{"negative workers", []string{"-push-workers", "-1"}, nil, "-push-workers -1"},
		{"bad size", nil, map[string]string{"COMB_MAX_PAYLOAD": "lots"}, `COMB_MAX_PAYLOAD="lots"`},
		{"missing file", []string{"-config", "/nonexistent/comb.conf"}, nil, "/nonexistent/comb.conf"},
		{"missing file from env", nil, map[string]string{"COMB_CONFIG": "/nonexistent/env.conf"}, "/nonexistent/env.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			_, err := parseServe(tc.args, envOf(tc.env), &out)
			require.Error(t, err)
			require.Contains(t, out.String(), tc.want, "the user is told why")
			require.Equal(t, 2, usageExit(err))
		})
	}

	// validate reports every problem at once.
	var out bytes.Buffer
	_, err := parseServe([]string{"-prefix", "a.b", "-sweep-interval", "1ns", "-pg-port", "-1"}, envOf(nil), &out)
	require.Error(t, err)
	for _, want := range []string{"-prefix", "-sweep-interval", "-pg-port"} {
		require.Contains(t, err.Error(), want)
	}
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	env := Env{Stdout: &o, Stderr: &e, Getenv: envOf(nil), Exit: func(int) { t.Error("unexpected exit") }}
	code = Run(t.Context(), env, args)
	return code, o.String(), e.String()
}

func TestDispatch(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "Usage:")

	for _, h := range []string{"help", "-h", "--help"} {
		code, stdout, _ := run(t, h)
		require.Equal(t, 0, code, h)
		require.Contains(t, stdout, "serve")
		require.Contains(t, stdout, "version")
	}

	code, _, stderr = run(t, "bogus")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown command "bogus"`)
	require.Contains(t, stderr, "Usage:")

	code, _, stderr = run(t, "help", "serve")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "$COMB_POSTGRES_URL")

	code, _, _ = run(t, "help", "bogus")
	require.Equal(t, 2, code)

	code, _, stderr = run(t, "serve", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "-nats-listen, $COMB_NATS_LISTEN")

	code, stdout, _ := run(t, "version")
	require.Equal(t, 0, code)
	require.True(t, strings.HasPrefix(stdout, "comb "), stdout)
}

func TestRegisterTwicePanics(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { Register(Command{Name: "serve"}) })
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "COMB_PG_PORT", EnvName("pg-port"))
	require.Equal(t, "COMB_PREFIX", EnvName("prefix"))
}

func TestWatchSignals(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)

	t.Run("first drains, second exits", func(t *testing.T) {
		t.Parallel()
		sigs := make(chan os.Signal, 2)
		ctx, cancel := context.WithCancel(t.Context())
		exited := make(chan int, 1)
		got := make(chan os.Signal, 1)
		go watchSignals(sigs, make(chan struct{}), func(s os.Signal) { got <- s; cancel() }, func(c int) { exited <- c }, log)
		sigs <- syscall.SIGINT
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("first signal did not cancel")
		}
		require.Equal(t, syscall.SIGINT, <-got, "the drain learns which signal")
		require.Empty(t, exited)
		sigs <- syscall.SIGTERM
		select {
		case code := <-exited:
			require.Equal(t, 1, code)
		case <-time.After(5 * time.Second):
			t.Fatal("second signal did not exit")
		}
	})

	t.Run("done ends the watch", func(t *testing.T) {
		t.Parallel()
		done := make(chan struct{})
		finished := make(chan struct{})
		go func() {
			watchSignals(make(chan os.Signal), done, func(os.Signal) {}, func(int) { t.Error("exit") }, log)
			close(finished)
		}()
		close(done)
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Fatal("watch did not end")
		}
	})
}

// TestServeHelpListsEverySetting: `comb serve -h` shows every setting
// with its variable and its default, and -config.
func TestServeHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t, "serve", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "-config, $COMB_CONFIG")
	for _, s := range broker.Settings() {
		require.Equal(t, EnvName(s.Flag()), s.EnvVar(), "one spelling of the variable")
		entry := "-" + s.Flag() + ", $" + s.EnvVar() + "\n      " + s.Usage
		if s.Default != "" {
			entry += fmt.Sprintf(" (default %q)", s.Default)
		}
		require.Contains(t, stderr, entry+"\n", "comb serve -h documents %s", s.Key)
	}
}
