package store_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// preparedOn returns the statements prepared on pool's one connection, by
// name, with how many generic plans each made.
func preparedOn(t *testing.T, pool *pgxpool.Pool) map[string]preparedStmt {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// The simple protocol: the question itself is prepared nowhere.
	rows, err := conn.Query(ctx, `SELECT name, statement, generic_plans FROM pg_prepared_statements`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	out := map[string]preparedStmt{}
	var name string
	var p preparedStmt
	_, err = pgx.ForEachRow(rows, []any{&name, &p.sql, &p.generic}, func() error {
		out[name] = p
		return nil
	})
	require.NoError(t, err)
	return out
}

type preparedStmt struct {
	sql     string
	generic int64
}

// TestWarmPreparesTheHotPath: after Warm, pushes (to new partitions and
// old, with dedup, under limits), hand-offs, acks, pops (of a named
// partition, of candidates, of any; trimmed to max_bytes) and the parked
// pops' check prepare no statement on either pool's connection: Warm
// prepared all of them, and planned the keyed ones. A statement added to
// that path and not to Warm's lists fails here. Left to their first run
// (lazy): the pops of delayed queues and the auto-ack pops.
func TestWarmPreparesTheHotPath(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, err := store.Open(ctx, testURL(t), store.Options{MaxConns: 1, WarmConns: 4, WarmPopConns: 4})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))
	// The queues exist, with their settings, before Warm: configuring is
	// not the hot path.
	configure(t, st, "q", domain.ConfigPatch{})
	configure(t, st, "dedup", domain.ConfigPatch{DedupWindowS: i64(60)})
	configure(t, st, "limited", domain.ConfigPatch{MaxMessages: i64(1000)})
	// So is making a group, once in its life.
	_, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g"})
	require.NoError(t, err)

	res, err := st.Warm(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Conns, "capped by each pool's one connection, opened before Warm")
	main, pop := preparedOn(t, st.Pool()), preparedOn(t, st.PopPool())
	require.Greater(t, res.Statements, len(store.KeyedStatements))
	for name, sql := range store.KeyedStatements {
		var planned bool
		for _, p := range slices.Concat(slices.Collect(maps.Values(main)), slices.Collect(maps.Values(pop))) {
			planned = planned || p.sql == sql && p.generic > 0
		}
		require.True(t, planned || strings.Contains(name, "delayed"), "%s: no generic plan made", name)
	}

	// The hot path, every kind of it.
	caughtUp(t, st, "q", "", "p")
	_, handed := pushOffer(t, st, msgs("q", "p", 1, 1), offer("q", "", "p", 10))
	require.Len(t, handed[0].Messages, 1)
	ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: handed[0].Messages[0].Offset, Lease: handed[0].Messages[0].Lease})
	pushN(t, st, "q", "p", 2, 3)
	pushN(t, st, "q", "new", 0, 3)
	for _, p := range []domain.PopParams{
		{Partition: "p", Max: 1},
		{Candidates: []string{"p", "new"}, Max: 1},
		{Max: 1},
		{Group: "g", Max: 10, MaxBytes: 1},
	} {
		p.Queue = domain.Global("q")
		_, err := st.Pop(ctx, p)
		require.NoError(t, err)
	}
	r := msgs("dedup", "p", 0, 2)
	r.Messages[0].ID, r.Messages[1].ID = "a", "b"
	require.NoError(t, push(t, st, r, r)[1].Err)
	pushN(t, st, "limited", "p", 0, 1)
	_, err = st.AnyReady(ctx, []domain.ReadyCheck{{Queue: domain.Global("q")}, {Queue: domain.Global("q"), Partition: "p"}})
	require.NoError(t, err)

	var missed []string
	for _, pool := range []struct {
		name   string
		pool   *pgxpool.Pool
		warmed map[string]preparedStmt
	}{{"main", st.Pool(), main}, {"pop", st.PopPool(), pop}} {
		for name, p := range preparedOn(t, pool.pool) {
			if _, ok := pool.warmed[name]; !ok {
				missed = append(missed, pool.name+": "+p.sql)
			}
		}
	}
	require.Empty(t, missed, "statements the hot path prepared, which Warm did not")
}

// TestWarmChangesNothing: Warm runs every statement with NULL keys and
// rolls back, so a queue's rows and the partition id sequence are as
// they were; it runs again on warm connections without error, and a
// canceled one says so.
func TestWarmChangesNothing(t *testing.T) {
	t.Parallel()
	st, conn := newStoreDB(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	snapshot := func() string {
		var s string
		require.NoError(t, conn.QueryRow(ctx, `SELECT concat_ws(' ',
			(SELECT string_agg(concat_ws(',', id, name, next_offset, low_offset), ';' ORDER BY id) FROM comb_partitions),
			(SELECT count(*) FROM comb_segments), (SELECT count(*) FROM comb_cursors),
			(SELECT count(*) FROM comb_ready), (SELECT count(*) FROM comb_queues),
			(SELECT last_value FROM comb_partitions_id_seq))`).Scan(&s))
		return s
	}
	before := snapshot()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := st.Warm(cctx)
	require.ErrorIs(t, err, context.Canceled)
	for range 2 {
		res, err := st.Warm(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, res.Conns, 4, "2 a pool by default, and any other open")
	}
	require.Equal(t, before, snapshot())
}

// TestWarmReadiesNewConnections: after Warm, a connection a pool opens
// for a request is readied before the request gets it; before Warm it is
// not (the statements name the schema Migrate makes).
func TestWarmReadiesNewConnections(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, err := store.Open(ctx, testURL(t), store.Options{MaxConns: 3, WarmConns: 2})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))
	// prepared says whether the statement a push's hand-off runs is
	// prepared on each of three connections held at once: the third is
	// opened for this.
	prepared := func() []bool {
		var out []bool
		var conns []*pgxpool.Conn
		for range 3 {
			c, err := st.Pool().Acquire(ctx)
			require.NoError(t, err)
			conns = append(conns, c)
		}
		for _, c := range conns {
			var n int
			require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1 AND generic_plans > 0`,
				pgx.QueryExecModeSimpleProtocol, store.KeyedStatements["push handoff"]).Scan(&n))
			out = append(out, n == 1)
			c.Release()
		}
		return out
	}
	require.Equal(t, []bool{false, false, false}, prepared())
	res, err := st.Warm(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Conns, 3+2, "the three open, and the pops' 2")
	// Closing one makes the pool open a new one for the next request.
	c, err := st.Pool().Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Conn().Close(ctx))
	c.Release()
	require.Equal(t, []bool{true, true, true}, prepared())
}
