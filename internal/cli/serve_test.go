package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/broker"
	"github.com/combmq/comb/internal/pgcluster"
	"github.com/combmq/comb/internal/testenv"
)

// childEnv makes the test binary act as `comb` (see TestMain), so the serve
// tests run the real command as a separate process without a `go build`.
const childEnv = "COMB_CLI_TEST_CHILD"

type serveProc struct {
	cmd     *exec.Cmd
	out     *testenv.Buffer
	natsURL string
	exited  chan struct{} // closed once cmd.Wait has returned
	err     error         // cmd.Wait's result, valid after exited
}

var readyRE = regexp.MustCompile(`msg="comb ready".* nats=(nats://\S+)`)

// startServe runs `comb serve` with args as a child process and waits until
// it logs that it is ready. It skips the test when the bridge is not
// implemented yet, and fails it on any other early exit.
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	// Tests run in parallel: the HTTP listener takes a free port unless the
	// test names one.
	if !slices.Contains(args, "-http") {
		args = append([]string{"-http", "127.0.0.1:0"}, args...)
	}
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	for _, kv := range os.Environ() { // the flags under test must win
		if strings.HasPrefix(kv, "COMB_") && !strings.HasPrefix(kv, "COMB_TEST_") {
			k, _, _ := strings.Cut(kv, "=")
			cmd.Env = append(cmd.Env, k+"=")
		}
	}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	p := &serveProc{cmd: cmd, out: &testenv.Buffer{}, exited: make(chan struct{})}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("comb serve output:\n%s", p.out.String())
		}
	})

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = p.out.Write([]byte(line + "\n"))
			if m := readyRE.FindStringSubmatch(line); m != nil {
				ready <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.exited)
	}()

	select {
	case p.natsURL = <-ready:
		return p
	case <-p.exited:
		if strings.Contains(p.out.String(), "bridge: not implemented yet") {
			t.Skip("bridge.Start is not implemented yet")
		}
		t.Fatalf("comb serve exited before it was ready (%v):\n%s", p.err, p.out.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("comb serve not ready after 2 minutes:\n%s", p.out.String())
	}
	return nil
}

// stop sends sig and returns the exit code.
func (p *serveProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("comb serve did not exit after %v:\n%s", sig, p.out.String())
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

// ping asks the micro framework's PING endpoint of the comb service, which
// `nats micro ping comb` uses too.
func ping(t *testing.T, natsURL string) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	reply, err := nc.Request("$SRV.PING.comb", nil, 5*time.Second)
	require.NoError(t, err)
	var pong struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(reply.Data, &pong), string(reply.Data))
	require.Equal(t, "comb", pong.Name)
	require.Equal(t, "io.nats.micro.v1.ping_response", pong.Type)
}

// TestServeLifecycle runs `comb serve` on a private cluster in a fresh data
// directory, pings it, interrupts it, and runs it again on the same
// directory, which must reuse the cluster.
func TestServeLifecycle(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	args := []string{"-data-dir", dataDir, "-nats-listen", "127.0.0.1:0", "-nats-http", "0", "-pg-port", "0"}

	p := startServe(t, args...)
	require.Contains(t, p.out.String(), "initialized a new PostgreSQL cluster")
	ping(t, p.natsURL)
	checkPostgresLogged(t, p.out.String(), dataDir)
	require.Equal(t, 0, p.stop(t, syscall.SIGINT))
	out := p.out.String()
	for _, want := range []string{"signal received, draining", "draining the bridge", "nats server stopped",
		"private postgresql stopped", "comb stopped"} {
		require.Contains(t, out, want)
	}

	// SIGTERM drains, then lets clients go in lame duck mode.
	p = startServe(t, append(args, "-lame-duck-duration", "1s", "-lame-duck-grace-period", "100ms")...)
	require.Contains(t, p.out.String(), "reusing PostgreSQL data directory")
	ping(t, p.natsURL)
	client, err := nats.Connect(p.natsURL, nats.MaxReconnects(0))
	require.NoError(t, err)
	defer client.Close()
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
	out = p.out.String()
	for _, want := range []string{"SIGTERM: draining, then lame duck mode", "draining the bridge", "nats server entering lame duck mode",
		"nats server stopped", "comb stopped"} {
		require.Contains(t, out, want)
	}
	require.Less(t, strings.Index(out, "draining the bridge"), strings.Index(out, "entering lame duck mode"),
		"in-flight requests are answered before clients are let go")
	require.Eventually(t, client.IsClosed, 5*time.Second, 10*time.Millisecond, "the lame duck closed the client")
}

// checkPostgresLogged: the log of a serve on a private cluster never holds
// the cluster's password, and the URL the ready line shows connects as it
// is, as does the loader given the data directory.
func checkPostgresLogged(t *testing.T, out, dataDir string) {
	t.Helper()
	pw, err := pgcluster.ReadPassword(filepath.Join(dataDir, "postgres"))
	require.NoError(t, err)
	require.NotContains(t, out, pw)
	m := regexp.MustCompile(`msg="comb ready".* postgres="?([^"\s]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Contains(t, m[1], "passfile=")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, u := range []string{m[1], loaderURL(t, "-data-dir", dataDir), loaderURL(t, "-postgres-url", m[1])} {
		conn, err := pgx.Connect(ctx, u)
		require.NoError(t, err, "the loader's PostgreSQL URL connects")
		require.NoError(t, conn.Close(ctx))
	}
}

// loaderURL is the PostgreSQL URL `comb loadtest` would sample with args.
func loaderURL(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cfg, _, err := parseLoadtest(args, envOf(nil), &out)
	require.NoError(t, err, out.String())
	return cfg.PostgresURL
}

func TestLoadtestDataDirErrors(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, _, err := parseLoadtest([]string{"-data-dir", t.TempDir()}, envOf(nil), &out)
	require.Error(t, err)
	require.Contains(t, out.String(), "-data-dir")
	out.Reset()
	_, _, err = parseLoadtest([]string{"-data-dir", t.TempDir(), "-postgres-url", "postgres://x@h/db"}, envOf(nil), &out)
	require.Error(t, err)
	require.Contains(t, out.String(), "give one")
}

// TestServeHidesPasswords: neither -h nor a configuration error shows the
// password of a PostgreSQL URL given in a variable or a flag.
func TestServeHidesPasswords(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{"COMB_POSTGRES_URL": "postgres://u:sekrit1@db:5432/comb"})
	var stdout, stderr bytes.Buffer
	e := Env{Stdout: &stdout, Stderr: &stderr, Getenv: env, Exit: func(int) { t.Error("unexpected exit") }}
	require.Equal(t, 0, Run(t.Context(), e, []string{"serve", "-h"}))
	require.Contains(t, stderr.String(), "$COMB_POSTGRES_URL")
	require.NotContains(t, stdout.String()+stderr.String(), "sekrit1")

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 2, Run(t.Context(), e, []string{"serve", "-postgres-url", "postgres://u:sekrit2@db:notaport/comb"}))
	require.Contains(t, stderr.String(), "-postgres-url")
	require.NotContains(t, stdout.String()+stderr.String(), "sekrit2")
}

// TestServeBadPostgres checks that an unreachable PostgreSQL is a clean
// failure with exit code 1, not a hang.
func TestServeBadPostgres(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := Env{Stdout: &stdout, Stderr: &stderr, Getenv: envOf(nil), Exit: func(int) { t.Error("unexpected exit") }}
	// -pg-start-wait 0: fail at the first attempt instead of waiting for
	// a PostgreSQL that will never come (the wait has tests of its own).
	code := Run(t.Context(), env, []string{"serve", "-postgres-url", "postgres://nobody@127.0.0.1:1/comb?connect_timeout=5",
		"-nats-listen", "127.0.0.1:0", "-nats-http", "0", "-http", "127.0.0.1:0", "-pg-start-wait", "0", "-data-dir", t.TempDir()})
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "comb serve failed")
	require.Contains(t, stderr.String(), "127.0.0.1:1")
}

func writeConf(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "comb.conf")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// TestServeConfigFile runs `comb serve -config` with a file that requires
// a NATS user and sets Comb's prefix: both take effect.
func TestServeConfigFile(t *testing.T) {
	t.Parallel()
	conf := writeConf(t, `
# nats-server's own syntax for the embedded server...
authorization { user: alice, password: s3cret }
# ...and Comb's settings in the comb block.
comb {
  prefix: shop
  push_workers: 2
}
`)
	p := startServe(t, "-config", conf, "-data-dir", t.TempDir(), "-nats-listen", "127.0.0.1:0", "-nats-http", "0", "-pg-port", "0")
	require.Contains(t, p.out.String(), "prefix=shop")
	require.NotContains(t, p.out.String(), "s3cret", "no password in the log")
	require.NotContains(t, p.out.String(), "_comb_", "nor Comb's own user")

	_, err := nats.Connect(p.natsURL, nats.MaxReconnects(0))
	require.Error(t, err, "a client without credentials is refused")

	nc, err := nats.Connect(p.natsURL, nats.UserInfo("alice", "s3cret"))
	require.NoError(t, err)
	defer nc.Close()
	reply, err := nc.Request("shop.put.q", []byte(`{"n":1}`), 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(reply.Data), `"status":"stored"`)
	reply, err = nc.Request("shop.info.q", nil, 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(reply.Data), `"messages":1`)
	_, err = nc.Request("comb.put.q", []byte(`{"n":1}`), 2*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders, "the default prefix is not served")

	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
}

// TestServeConfigFileErrors: a bad file is bad usage (exit 2), and the
// message names what and where.
func TestServeConfigFileErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		body string
		want []string
	}{
		"unknown comb key": {"port: 4222\ncomb {\n  prefix: shop\n  push_wrokers: 2\n}\n",
			[]string{`unknown setting "push_wrokers"`, "comb.conf:4:"}},
		"unknown nats key": {"bogus_key: 1\ncomb { prefix: shop }\n",
			[]string{`comb.conf:1:0: unknown field "bogus_key"`}},
		"bad value": {"comb {\n  sweep_interval: soon\n}\n",
			[]string{"comb.conf:2:", "comb.sweep_interval", `"soon"`}},
		"valid file, invalid setting": {"comb { prefix: \"a.b\" }\n", []string{`-prefix "a.b"`}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conf := writeConf(t, tc.body)
			code, _, stderr := run(t, "serve", "-config", conf, "-nats-listen", "127.0.0.1:0", "-nats-http", "0",
				"-pg-port", "0", "-data-dir", t.TempDir())
			require.Equal(t, 2, code, stderr)
			for _, w := range tc.want {
				require.Contains(t, stderr, w)
			}
		})
	}
}

// TestServeConfigPrecedence: defaults < file < environment < flags.
func TestServeConfigPrecedence(t *testing.T) {
	t.Parallel()
	conf := writeConf(t, "comb {\n  prefix: fromfile\n  push_workers: 3\n  ack_workers: 5\n  pop_workers: 6\n}\n")

	cfg, err := parseServe([]string{"-config", conf}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "fromfile", cfg.Bridge.Prefix)
	require.Equal(t, 3, cfg.Bridge.PushWorkers)
	require.Equal(t, broker.DefaultConfig().Bridge.AdminWorkers, cfg.Bridge.AdminWorkers, "unset in the file: the default")

	env := envOf(map[string]string{"COMB_PREFIX": "fromenv", "COMB_PUSH_WORKERS": "4", "COMB_CONFIG": conf})
	cfg, err = parseServe(nil, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, conf, cfg.File, "COMB_CONFIG names the file")
	require.Equal(t, "fromenv", cfg.Bridge.Prefix, "the environment beats the file")
	require.Equal(t, 4, cfg.Bridge.PushWorkers)
	require.Equal(t, 5, cfg.Bridge.AckWorkers, "the file still sets the rest")

	cfg, err = parseServe([]string{"-prefix", "fromflag", "-ack-workers", "1"}, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "fromflag", cfg.Bridge.Prefix, "a flag beats the environment and the file")
	require.Equal(t, 1, cfg.Bridge.AckWorkers, "a flag beats the file")
	require.Equal(t, 4, cfg.Bridge.PushWorkers)
	require.Equal(t, 6, cfg.Bridge.PopWorkers)

	other := writeConf(t, "comb { prefix: other }\n")
	cfg, err = parseServe([]string{"-config", other}, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, other, cfg.File, "-config beats COMB_CONFIG")
}
