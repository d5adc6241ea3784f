package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The serve tests run this binary as `comb`: see startServe.
	if os.Getenv(childEnv) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestServeConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe(nil, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, defaultServeConfig(), cfg)
	require.Equal(t, serveConfig{NATSListen: "127.0.0.1:4222", NATSHTTP: 8222, DataDir: "./comb-data",
		PGPort: 5433, LogLevel: "info", Prefix: "comb", SweepInterval: time.Second}, cfg)
	host, port, err := cfg.natsAddr()
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.Equal(t, 4222, port)
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
	})
	cfg, err := parseServe(nil, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, serveConfig{NATSListen: "0.0.0.0:0", NATSHTTP: 0, PostgresURL: "postgres://u:p@db:5432/comb",
		DataDir: "/var/lib/comb", PGPort: 6000, LogLevel: "debug", Prefix: "fromenv", SweepInterval: 250 * time.Millisecond}, cfg)
	_, port, err := cfg.natsAddr()
	require.NoError(t, err)
	require.Equal(t, -1, port, "port 0 means pick a free one")

	// A flag wins over its variable, in either spelling.
	cfg, err = parseServe([]string{"-prefix", "fromflag", "--pg-port=7000", "-log-level", "WARN"}, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "fromflag", cfg.Prefix)
	require.Equal(t, 7000, cfg.PGPort)
	require.Equal(t, "/var/lib/comb", cfg.DataDir, "unset flags still come from the environment")
	level, err := cfg.level()
	require.NoError(t, err)
	require.Equal(t, slog.LevelWarn, level)
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
		{"http port", []string{"-nats-http", "-2"}, nil, "-nats-http -2"},
		{"pg port", nil, map[string]string{"COMB_PG_PORT": "70000"}, "-pg-port 70000"},
		{"empty data dir", []string{"-data-dir", ""}, nil, "-data-dir is empty"},
		{"log level", []string{"-log-level", "loud"}, nil, `-log-level "loud"`},
		{"prefix dots", []string{"-prefix", "a.b"}, nil, `-prefix "a.b"`},
		{"prefix wildcard", []string{"-prefix", ">"}, nil, `-prefix ">"`},
		{"postgres url", []string{"-postgres-url", "postgres://h:notaport/db"}, nil, "-postgres-url"},
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
	_, err := parseServe([]string{"-prefix", "", "-log-level", "x", "-pg-port", "-1"}, envOf(nil), &out)
	require.Error(t, err)
	for _, want := range []string{"-prefix", "-log-level", "-pg-port"} {
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
		go watchSignals(sigs, make(chan struct{}), cancel, func(c int) { exited <- c }, log)
		sigs <- syscall.SIGINT
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("first signal did not cancel")
		}
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
			watchSignals(make(chan os.Signal), done, func() {}, func(int) { t.Error("exit") }, log)
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
