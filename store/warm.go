package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// A new PostgreSQL backend pays for each statement the first time it runs
// it: it loads the catalog entries of the tables and indexes the statement
// names, parses it, and plans it; pgx, for its part, prepares it (one more
// round trip). On a connection that has run it, a push statement takes
// 0.1 ms; on a fresh one its parse alone took 15–40 ms, and a pop's parse
// and plan up to 300 ms on a 2-core machine busy with the load. A broker
// opens its connections as its first requests need them, so a fresh
// broker's first second under load paid all of that at once, for some
// twenty connections (docs/benchmarks.md, "A fresh broker's first
// second"). Warm pays it before the broker says it is ready.

// warmStatement is a statement the requests' hot path runs. Warm runs it
// once with NULL for every parameter, in a transaction it rolls back, so
// that PostgreSQL plans it too: a statement of the hot path finds no row
// by a NULL key, and changes none.
type warmStatement struct {
	name string // the keyed statements', for tests
	sql  string
	// args replace the NULL parameters of a statement that would break a
	// NOT NULL constraint with them: a statement that failed did not stay
	// prepared.
	args []any
	// keyed: its transactions plan it with keyedPlansSQL's settings, and
	// a generic plan made under them is kept for the connection's life.
	keyed bool
	// lazy: Warm leaves it to its first run. Parsing and planning a pop
	// scan took about 40 ms on a 2-core machine while a broker started:
	// only the pops most brokers run are worth that on every connection
	// at every start.
	lazy bool
}

// warmMain are the statements of the pool's requests: pushes and puts
// (with new partitions, holds, dedup and limits), the hand-offs of pushes
// to waiting pops, acks, and the parked pops' safety check. The pops that
// acknowledge as they lease run there too; their statements are left to
// their first run, like lazy ones.
var warmMain = []warmStatement{
	{name: "push lock", sql: lockPartitionsSQL, keyed: true},
	{name: "push alloc", sql: allocOffsetsSQL, keyed: true},
	{name: "push insert", sql: insertSegmentsSQL, keyed: true},
	{name: "push holds", sql: insertHoldsSQL, keyed: true},
	{name: "push handoff", sql: handoffSQL, keyed: true},
	{name: "push fresh queues", sql: lockFreshQueuesSQL, keyed: true},
	{name: "push fresh partitions", sql: insertFreshSQL, keyed: true},
	{name: "push fresh cursors", sql: insertFreshCursorsSQL, keyed: true},
	{name: "dedup lock", sql: lockDedupPartitionsSQL, keyed: true},
	{name: "dedup read", sql: readDedupSetsSQL, keyed: true},
	{name: "dedup check", sql: checkSuspectsSQL, keyed: true},
	{name: "dedup remember", sql: insertDedupSetSQL, keyed: true,
		args: []any{int64(0), int64(0), int64(0), []string{}, []int32{}}},
	{name: "ack", sql: ackCompletedSQL, keyed: true},
	// What opens an ack's transaction unless DurableAcks (Store.ackPlans).
	{sql: keyedPlansSQL + asyncCommitSQL},
	{name: "ready checks", sql: anyReadySQL, keyed: true},
	{sql: preloadPartitionsSQL},
	{sql: queueFiguresSQL},
	{sql: reserveIDsSQL}, // generate_series(1, NULL): no id taken
	{sql: partitionsByNameSQL},
}

// warmPop are the statements of the pop pool: every other pop.
var warmPop = []warmStatement{
	{name: "pop any partition", sql: popSQL, keyed: true},
	{name: "pop one partition", sql: popPartitionSQL, keyed: true},
	{name: "pop candidates", sql: popCandidatesSQL, keyed: true},
	// The pops of queues with a delay_ms.
	{name: "pop delayed any", sql: popDelayedSQL, keyed: true, lazy: true},
	{name: "pop delayed partition", sql: popDelayedPartitionSQL, keyed: true, lazy: true},
	{name: "pop delayed candidates", sql: popDelayedCandidatesSQL, keyed: true, lazy: true},
	{sql: trimPopSQL},
	// The partitions a push to a queue with deduplication creates first
	// (createPartitions).
	{sql: lockQueueSQL("FOR KEY SHARE")},
	{sql: insertPartitionsSQL},
	{sql: partitionsByNameSQL},
}

// WarmResult says what Warm did.
type WarmResult struct {
	Conns      int // connections readied, of both pools
	Statements int // statements ready on them, all told
}

// warmedKey marks a connection warmConn readied, in its CustomData.
const warmedKey = "comb.warmed"

// Warm readies the pools for requests. From now on every connection
// they open prepares the statements requests run on its pool, and plans
// those that keyedPlansSQL plans (warmMain, warmPop), before it is used;
// and Warm readies those open now, and opens more up to Options.WarmConns
// (WarmPopConns) at once, so that the first requests after a start
// do not pay new backends' first statements (see above). Call it after
// Migrate: the statements name the current schema. It changes no row.
//
// An error leaves the pools as good as before: a connection not readied
// pays its first statements when requests run them.
func (s *Store) Warm(ctx context.Context) (WarmResult, error) {
	s.warm.Store(true)
	var g errgroup.Group
	var main, pop WarmResult
	g.Go(func() (err error) { main, err = warmPool(ctx, s.pool, warmMain); return err })
	g.Go(func() (err error) { pop, err = warmPool(ctx, s.popPool, warmPop); return err })
	err := g.Wait()
	out := WarmResult{Conns: main.Conns + pop.Conns, Statements: main.Statements + pop.Statements}
	if err != nil {
		return out, fmt.Errorf("store: warm: %w", classify(err))
	}
	return out, nil
}

// afterConnect readies a new connection of the pool whose hot path is
// stmts: the store's encoders, then warmNew.
func (s *Store) afterConnect(stmts []warmStatement) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, c *pgx.Conn) error {
		registerEncoders(c.TypeMap())
		return s.warmNew(ctx, c, stmts)
	}
}

// warmNew is the pools' AfterConnect part of Warm: once Warm was called,
// a new connection is readied before its first use. A failure is logged
// and the connection used all the same, only colder, unless it closed
// (pgx closes one whose statement was canceled): then the pool drops it.
func (s *Store) warmNew(ctx context.Context, conn *pgx.Conn, stmts []warmStatement) error {
	if !s.warm.Load() {
		return nil
	}
	err := warmConn(ctx, conn, stmts)
	if err == nil {
		return nil
	}
	if conn.IsClosed() {
		return fmt.Errorf("store: warm a new connection: %w", classify(err))
	}
	s.log.Warn("warm a new connection", "err", classify(err))
	return nil
}

// warmPool holds every idle connection of pool, and more up to its
// MinConns (which AfterConnect readies as they open), and readies those
// opened before Warm.
func warmPool(ctx context.Context, pool *pgxpool.Pool, stmts []warmStatement) (WarmResult, error) {
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for len(conns) < int(pool.Config().MinConns) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return WarmResult{}, err
		}
		conns = append(conns, c)
	}
	var g errgroup.Group
	for _, c := range conns {
		g.Go(func() error { return warmConn(ctx, c.Conn(), stmts) })
	}
	if err := g.Wait(); err != nil {
		return WarmResult{}, err
	}
	var warmed int
	for _, st := range stmts {
		if !st.lazy {
			warmed++
		}
	}
	return WarmResult{Conns: len(conns), Statements: len(conns) * warmed}, nil
}

// warmConn readies stmts on conn the way the requests run them: in a
// batch, through pgx's statement cache, in a transaction that opens with
// keyedPlansSQL when theirs do.
func warmConn(ctx context.Context, conn *pgx.Conn, stmts []warmStatement) error {
	if conn.PgConn().CustomData()[warmedKey] != nil {
		return nil
	}
	// BEGIN and COMMIT, which the requests' batches prepare too.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("begin and commit: %w", err)
	}
	for _, st := range stmts {
		if st.lazy {
			continue
		}
		// The parameter count, from the unnamed statement; the cache's
		// own parse after it finds the catalogs loaded.
		sd, err := conn.PgConn().Prepare(ctx, "", st.sql, nil)
		if err != nil {
			return fmt.Errorf("describe %.60q: %w", st.sql, err)
		}
		if err := warmRun(ctx, conn, st, len(sd.ParamOIDs)); err != nil {
			return fmt.Errorf("run %.60q: %w", st.sql, err)
		}
	}
	conn.PgConn().CustomData()[warmedKey] = true
	return nil
}

// warmRun runs st with n NULL parameters in a transaction it rolls back.
func warmRun(ctx context.Context, conn *pgx.Conn, st warmStatement, n int) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if st.keyed {
		b.Queue(keyedPlansSQL)
	}
	args := st.args
	if args == nil {
		args = make([]any, n)
	}
	b.Queue(st.sql, args...)
	b.Queue("ROLLBACK")
	err := conn.SendBatch(ctx, b).Close()
	// An error skipped the ROLLBACK.
	if conn.PgConn().TxStatus() != 'I' {
		if _, rerr := conn.Exec(ctx, "ROLLBACK"); err == nil {
			err = rerr
		}
	}
	return err
}
