// Package pgtest gives test binaries a real PostgreSQL: one throwaway
// cluster per test binary (or the server named by COMB_TEST_POSTGRES_URL),
// and a fresh schema per test so tests run in parallel without seeing each
// other's tables.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }
//
// or, without goleak, `func TestMain(m *testing.M) { pgtest.Main(m) }`.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/combmq/comb/internal/pgcluster"
)

// EnvURL names the environment variable that points the tests at a running
// PostgreSQL server instead of a throwaway cluster. The URL's user must be
// allowed to create schemas in its database.
const EnvURL = "COMB_TEST_POSTGRES_URL"

// Set by Runner.Run before any test runs, read-only while tests run.
var (
	baseURL string
	cluster *pgcluster.Cluster
	admin   *pgxpool.Pool
)

// Runner runs a test binary's tests with PostgreSQL available. It satisfies
// goleak.TestingM, so goleak checks for leaks after PostgreSQL is stopped.
type Runner struct {
	m        *testing.M
	fixtures []func() (stop func() error, err error)
}

// Wrap returns a Runner for m; call its Run from TestMain.
func Wrap(m *testing.M) *Runner { return &Runner{m: m} }

// Run starts PostgreSQL (or connects to COMB_TEST_POSTGRES_URL), runs the
// tests, stops PostgreSQL and returns the exit code for os.Exit.
func Run(m *testing.M) int { return Wrap(m).Run() }

// Main is Run followed by os.Exit.
func Main(m *testing.M) { os.Exit(Run(m)) }

// With adds a fixture shared by the whole binary, such as the Comb that
// runnable examples talk to: Run calls start once PostgreSQL is up, before
// any test, and the stop it returns after the tests, before PostgreSQL
// stops. Fixtures start in the order added and stop in reverse.
func (r *Runner) With(start func() (stop func() error, err error)) *Runner {
	r.fixtures = append(r.fixtures, start)
	return r
}

// Run starts PostgreSQL and the fixtures, runs the tests and stops them
// all. It returns 1 without running any test when PostgreSQL or a fixture
// cannot be had, and 1 when a fixture fails to stop.
func (r *Runner) Run() int {
	tmp, err := setup()
	defer teardown(tmp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	code := 0
	var stops []func() error
	for _, start := range r.fixtures {
		stop, err := start()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: start fixture: %v\n", err)
			code = 1
			break
		}
		stops = append(stops, stop)
	}
	if code == 0 {
		code = r.m.Run()
	}
	for i := len(stops) - 1; i >= 0; i-- {
		if err := stops[i](); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop fixture: %v\n", err)
			code = 1
		}
	}
	return code
}

func setup() (tmp string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	baseURL = os.Getenv(EnvURL)
	if baseURL == "" {
		// Only warnings: a cluster starting in every test binary is not news.
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		// The data directory sits under a 0755 parent of our own, so the
		// postgres OS user can reach it when the tests run as root.
		tmp, err = os.MkdirTemp("", "comb-pgtest-")
		if err != nil {
			return "", err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return tmp, err
		}
		cluster, err = pgcluster.Start(ctx, pgcluster.Options{
			Dir:      filepath.Join(tmp, "data"),
			Settings: settings(),
			Logger:   log,
		})
		if err != nil {
			return tmp, fmt.Errorf("start a throwaway PostgreSQL (or set %s): %w", EnvURL, err)
		}
		baseURL = cluster.URL()
	}
	cfg, err := pgxpool.ParseConfig(baseURL)
	if err != nil {
		return tmp, fmt.Errorf("parse %s: %w", redact(baseURL), err)
	}
	cfg.MaxConns = 4
	cfg.MinConns = 0
	admin, err = pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		return tmp, fmt.Errorf("connect to %s: %w", redact(baseURL), err)
	}
	return tmp, nil
}

// settings are the throwaway cluster's: fast and not crash safe for tests,
// durable (fsync and synchronous_commit on) when the binary runs benchmarks,
// whose figures must mean what a user's server would do.
func settings() map[string]string {
	if !flag.Parsed() {
		flag.Parse()
	}
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		s := pgcluster.DurableSettings()
		s["max_connections"] = pgcluster.TestSettings()["max_connections"]
		return s
	}
	return pgcluster.TestSettings()
}

func teardown(tmp string) {
	if admin != nil {
		admin.Close()
		admin = nil
	}
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
		cluster = nil
	}
	if tmp != "" {
		_ = os.RemoveAll(tmp)
	}
}

// Cluster returns the throwaway cluster, so fault tests can restart or kill
// PostgreSQL; nil when the tests use COMB_TEST_POSTGRES_URL. Restarting it
// disturbs every test of the binary running at that time.
func Cluster() *pgcluster.Cluster { return cluster }

// URL creates a fresh schema, returns a connection URL whose sessions use
// it (search_path), and drops the schema with everything in it when the
// test ends. Close pools opened on the URL in a t.Cleanup registered after
// URL, so they close before the schema is dropped.
func URL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, drop, err := Schema(ctx, t.Name())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return u
}

// Schema is URL for code that has no test at hand, such as a Runner
// fixture: it creates a fresh schema whose name starts with label, and
// returns a connection URL whose sessions use it and a function that drops
// it with everything in it. Close the pools opened on the URL before drop.
func Schema(ctx context.Context, label string) (string, func(context.Context) error, error) {
	if admin == nil {
		return "", nil, errors.New("no PostgreSQL: call pgtest.Run (or Wrap, or Main) from TestMain")
	}
	schema := schemaName(label)
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func(ctx context.Context) error {
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s (a connection still open on it?): %w", schema, err)
		}
		return nil
	}
	u, err := withSearchPath(baseURL, schema)
	if err != nil {
		return "", nil, errors.Join(err, drop(ctx))
	}
	return u, drop, nil
}

// schemaName makes a unique, unquoted-safe schema name that still says
// which test made it, for whoever finds one left behind.
func schemaName(test string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len() >= 40 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}

// withSearchPath adds search_path to a URL or keyword/value connection
// string. pgx sends parameters it does not know as session settings in the
// startup message, so every connection of a pool starts in the schema.
func withSearchPath(base, schema string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", fmt.Errorf("parse %s: %w", redact(base), err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	if base == "" {
		return "", errors.New("no base URL")
	}
	return base + " search_path=" + schema, nil
}

// redact hides a password in a URL for error messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}
