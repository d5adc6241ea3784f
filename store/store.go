// Package store owns every line of Comb's SQL: the embedded migrations and
// the log engine (push, pop, ack, renew, dead letters, queue settings).
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"

	"github.com/combmq/comb/domain"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Defaults of Options' zero fields.
const (
	DefaultMaxConns      = 16
	DefaultQueueCacheTTL = 2 * time.Second
	// DefaultConnectTimeout bounds opening one connection when the URL
	// has no connect_timeout: a PostgreSQL host that vanished, or a port
	// another server took, fails a store call in seconds instead of
	// holding it for the bridge's whole request_timeout.
	DefaultConnectTimeout = 5 * time.Second
)

// Options tune a Store. The zero value is usable.
type Options struct {
	// MaxConns caps the connection pool; 0 means DefaultMaxConns.
	MaxConns int32
	// WarmConns and WarmPopConns are how many connections the pool of
	// pushes and acks, and the pool of pops, keep open (at least 2, at
	// most MaxConns) and Warm readies at once: as many as the requests
	// use at the same time.
	WarmConns, WarmPopConns int32
	// DurablePops makes a pop's lease commit wait for the WAL flush like a
	// push does. Off by default: a lease lost in a PostgreSQL crash only
	// means its messages are delivered again, which an expired lease does
	// anyway, so pops commit asynchronously and do not queue behind fsyncs.
	// (Auto-ack pops settle what they deliver and always commit durably.)
	DurablePops bool
	// DurableAcks makes an ack's commit wait for the WAL flush like a
	// push does. Off by default, for the same reason as DurablePops: an
	// ack lost in a PostgreSQL crash (at most those of the last three
	// wal_writer_delay, PostgreSQL's bound on an asynchronous commit's
	// risk, and always a suffix of the commits: any later durable commit
	// flushes every ack before it) only means its messages are delivered
	// again, at least once. Pushes must not queue behind acks' fsyncs: at
	// 1,000 puts a second they did (docs/benchmarks.md, "Acks that do not
	// wait for the WAL flush"). The acks of a comb.txn commit with its
	// pushes, durably.
	DurableAcks bool
	// QueueCacheTTL is how long a queue's settings are cached before they are
	// read again; 0 means DefaultQueueCacheTTL. A configure on another bridge takes effect
	// here within this time.
	QueueCacheTTL time.Duration
	// MaxQueues returns a tenant's most queues, 0 for no limit; nil means
	// no tenant has one. A push or configure that would create a queue
	// past it is refused with domain.ErrLimit.
	MaxQueues func(tenant string) int64
	Logger    *slog.Logger
	// Tracer, when set, sees every statement and batch of both pools
	// (pgx's tracing hook: a pgx.QueryTracer, and a pgx.BatchTracer if it
	// is one).
	Tracer pgx.QueryTracer
}

// Store is Comb's PostgreSQL log engine. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// popPool serves pops; see Options.DurablePops.
	popPool *pgxpool.Pool
	log     *slog.Logger
	ttl     time.Duration
	// ackPlans opens the transaction of the acks that share a statement:
	// keyedPlansSQL, and asyncCommitSQL unless Options.DurableAcks.
	ackPlans string
	// ackCommit opens the transaction of a request's acks applied in
	// order: asyncCommit unless Options.DurableAcks.
	ackCommit string

	queueLimit func(tenant string) int64

	mu     sync.Mutex
	queues map[domain.QueueRef]cachedQueue
	parts  map[partKey]int64 // partition id by (queue id, name)
	// complete says, by queue id, whether parts holds all of a queue's
	// partitions (fresh.go); pending holds the ids reserved for partitions
	// that pushes in flight create.
	complete map[int64]uint8
	pending  map[partKey]int64
	groups   map[groupKey]time.Time // groups known to exist, and when last seen
	// scanFrom is, by group, the partition id after which the group's
	// next scan of its ready set starts: the last its scans leased here
	// (popScan's rotation).
	scanFrom map[groupKey]int64
	// groupFlight shares one group creation among concurrent callers.
	groupFlight singleflight.Group
	// marking holds the groups known here to have partitions not yet in
	// the ready set for them (comb_groups.unmarked_after, markWindowSQL);
	// markFlight shares one marking step among a group's concurrent pops.
	marking    map[groupKey]struct{}
	markFlight singleflight.Group
	markWindow int // partitions a marking step reads (markWindowSize)

	reserveMu sync.Mutex // held while reserved is refilled
	reserved  []int64    // partition ids taken from the sequence, not used yet

	slotsMu sync.Mutex // held through a round of slot maintenance
	// readyFrom is where the sweeper's next window of the ready set
	// starts (staleReadySQL).
	readyFrom atomic.Int64
	// readyTrimmed counts the ready rows trimmed since the sweeper last
	// vacuumed the set (vacuumReadyIfDue).
	readyTrimmed atomic.Int64
	// warm: Warm was called, and new connections are readied (warm.go).
	warm atomic.Bool
	// readySeen is the end at which the sweeper last saw each caught-up
	// ready partition that it has not trimmed yet (readySeenAgain).
	readyMu   sync.Mutex
	readySeen map[readyKey]int64
	slots     slotState

	dedup *dedupCache // the dedup sets of the partitions pushed to (dedup.go)
}

type cachedQueue struct {
	q       queueRow
	fetched time.Time
}

type partKey struct {
	queue int64
	name  string
}

type groupKey struct {
	queue int64
	name  string
}

// Open connects to PostgreSQL at url. It does not migrate; call Migrate.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse url: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	cfg.MinConns = min(max(2, opts.WarmConns), cfg.MaxConns)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	// A connection lives until it fails, unless the URL names a lifetime:
	// pgx's default of an hour replaced every connection of a broker at
	// about the same moment, and under load the new ones' first statements
	// held requests up. At 1,000 puts a second with a 20 s lifetime each
	// replacement was a 1-2 s e2e p99 spike, warm connections or not
	// (docs/benchmarks.md, "Connections that expire").
	if !strings.Contains(url, "pool_max_conn_lifetime") {
		cfg.MaxConnLifetime = 0
	}
	// A push reply means durable: never inherit a server-wide
	// synchronous_commit = off.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	// No JIT unless the URL asks for it: Comb's statements are short, and
	// PostgreSQL compiles a statement whose estimated cost passes
	// jit_above_cost on every run. A generic plan of retention's search
	// costed 10 million on a queue of 200,000 partitions: 1 ms to run, 447
	// ms to compile, every sweep (docs/benchmarks.md, "What an idle broker
	// costs beside a big queue").
	if _, ok := cfg.ConnConfig.RuntimeParams["jit"]; !ok {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "comb"
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ttl := opts.QueueCacheTTL
	if ttl == 0 {
		ttl = DefaultQueueCacheTTL
	}
	s := &Store{
		log:      log,
		ttl:      ttl,
		ackPlans: keyedPlansSQL,

		queueLimit: opts.MaxQueues,
		queues:     map[domain.QueueRef]cachedQueue{},
		parts:      map[partKey]int64{},
		complete:   map[int64]uint8{},
		pending:    map[partKey]int64{},
		groups:     map[groupKey]time.Time{},
		marking:    map[groupKey]struct{}{},
		markWindow: markWindowSize,
		scanFrom:   map[groupKey]int64{},
		dedup:      newDedupCache(),
	}
	popCfg := cfg.Copy()
	cfg.AfterConnect = s.afterConnect(warmMain)
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	if !opts.DurablePops {
		popCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	if !opts.DurableAcks {
		s.ackPlans, s.ackCommit = keyedPlansSQL+asyncCommitSQL, asyncCommit
	}
	// A pop statement takes about 2 ms to plan and 0.1 to 1 ms to run.
	// PostgreSQL plans a prepared statement anew for each of its first
	// five runs on a connection before it settles on the generic plan,
	// which pops always end up with (their parameters are keys, not
	// skewed values): planning it once saves that on every new connection,
	// most of a fresh broker's first second.
	popCfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	popCfg.MinConns = min(max(2, opts.WarmPopConns), popCfg.MaxConns)
	popCfg.AfterConnect = s.afterConnect(warmPop)
	if s.popPool, err = pgxpool.NewWithConfig(ctx, popCfg); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	return s, nil
}

// Pool returns the connection pool, for tests and samplers that read
// PostgreSQL's statistics.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the connection pool.
func (s *Store) Close() {
	s.pool.Close()
	s.popPool.Close()
}

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", classify(err))
	}
	return nil
}

// keyedPlansSQL opens the transactions of the statements that find every
// row they touch by key: pushes, acks, and pops of named partitions. It
// makes them run generic plans that read by key whatever the statistics
// say, for the rest of the transaction (is_local), so the pool's other
// statements (the sweeper's, the admin replies') keep PostgreSQL's choice.
//
//   - Generic plans: these statements take arrays of keys, and PostgreSQL
//     prices a generic plan for a guess of 10 elements against a custom
//     plan for the real count, one or two at light load. The custom plan
//     always looked cheaper, so each push statement was planned anew on
//     every run: at 1,000 single-message puts a second pg_stat_statements
//     counted 19,253 plans for 19,245 runs of each of the push's three
//     statements, 0.22 of a core planning them against 0.10 executing
//     them, and 0.05 more planning acks.
//   - By key: a plan is chosen for the table's size when it is made, and
//     a generic plan is kept until the next ANALYZE. After an ANALYZE of a
//     small comb_partitions or comb_cursors (200 rows, a few pages) the
//     generic plans read them whole and hash-joined them, and kept doing
//     so while updates grew them to tens of pages; with sequential scans
//     and hash and merge joins off they look up each row by key. With
//     bitmap scans off too, a scan of an index returns its rows in the
//     index's order: a pop's scan of the ready set reads from its position
//     and stops when it has enough (popScan), where a generic plan sorted
//     a bitmap scan's rows, all of them, to take the first few.
//
// TestHotStatementsPlanOnce and TestHotPlansByKey pin both.
const keyedPlansSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// asyncCommit makes its transaction commit without waiting for the WAL
// flush (Options.DurableAcks); asyncCommitSQL does it as one more column
// of keyedPlansSQL.
const (
	asyncCommit    = `SET LOCAL synchronous_commit = off`
	asyncCommitSQL = `, set_config('synchronous_commit', 'off', true)`
)

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".up.sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_what.up.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		body, err := migrationFS.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// Migrate applies the embedded migrations that the database lacks, each in
// its own transaction, in the connection's search_path schema. Several
// bridges may call it at once: an advisory lock serialises them.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", classify(err))
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext(current_schema() || '.comb_migrate'))`); err != nil {
		return fmt.Errorf("store: migrate: lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext(current_schema() || '.comb_migrate'))`)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS comb_schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("store: migrate: version table: %w", err)
	}
	for _, m := range ms {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM comb_schema_migrations WHERE version = $1)`, m.version).Scan(&exists); err != nil {
				return err
			}
			if exists {
				return nil
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO comb_schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
			if err == nil {
				s.log.Info("applied migration", "version", m.version, "name", m.name)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("store: migrate %s: %w", m.name, err)
		}
	}
	return nil
}

// classify wraps errors that mean PostgreSQL is unreachable with
// domain.ErrUnavailable, so callers can answer 503 instead of 500.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, domain.ErrUnavailable) {
		return err
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connErr), pgconn.SafeToRetry(err):
		// Nothing reached the server: it is known not to have run.
		return fmt.Errorf("%w: %w", domain.ErrUnavailable, err)
	case errors.As(err, &netErr),
		// A server that died mid-conversation: the socket ends early,
		// after the request went out, so a commit may have happened.
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("%w: %w: %w", domain.ErrUnavailable, domain.ErrOutcomeUnknown, err)
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P0x: shutting down; 53: out of resources.
		if strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "53") {
			return fmt.Errorf("%w: %w", domain.ErrUnavailable, err)
		}
	case pgconn.SafeToRetry(err), strings.Contains(err.Error(), "conn closed"):
		return fmt.Errorf("%w: %w", domain.ErrUnavailable, err)
	}
	return err
}
