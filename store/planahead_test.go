package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// generic reads, on each idle connection of the pop pool, how many times
// PostgreSQL ran a generic plan of each planned pop statement there
// (pg_prepared_statements), and fails if pgx prepared one of them a
// second time under its statement cache's name.
func generic(t *testing.T, pool *pgxpool.Pool) [][]int64 {
	t.Helper()
	ctx := ctxT(t)
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var out [][]int64
	for _, c := range conns {
		var counts []int64
		for _, sql := range store.PlannedPops {
			var n, copies int64
			require.NoError(t, c.QueryRow(ctx, `
				SELECT coalesce(sum(generic_plans) FILTER (WHERE name LIKE 'stmt\_%'), 0), count(*) FILTER (WHERE name LIKE 'stmtcache\_%')
				FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&n, &copies))
			require.Zero(t, copies, "prepared twice:\n%s", sql)
			counts = append(counts, n)
		}
		out = append(out, counts)
	}
	return out
}

// waitIdle waits until pool holds n idle connections.
func waitIdle(t *testing.T, pool *pgxpool.Pool, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pool.Stat().IdleConns() < n {
		require.True(t, time.Now().Before(deadline), "pop pool: %d idle connections, want %d", pool.Stat().IdleConns(), n)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPopStatementsPlannedAhead: each connection of the pop pool has the
// pop statements prepared and their generic plans made before its first
// pop, whether it opened before the migrations made the tables (Migrate
// plans it) or after (it plans them as it connects); and pops then run
// those statements, not copies of their own.
func TestPopStatementsPlannedAhead(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Opened on an empty database: its connections cannot plan, until
	// Migrate.
	first, err := store.Open(ctx, url, store.Options{MaxConns: 8, PopConns: 2})
	require.NoError(t, err)
	t.Cleanup(first.Close)
	waitIdle(t, first.PopPool(), 2)
	require.Equal(t, [][]int64{{0, 0, 0}, {0, 0, 0}}, generic(t, first.PopPool()), "nothing to plan before the tables exist")
	require.NoError(t, first.Migrate(ctx))
	require.Equal(t, [][]int64{{1, 1, 1}, {1, 1, 1}}, generic(t, first.PopPool()), "planned once each by Migrate")

	// Opened on a migrated database: each connection plans as it opens.
	st, err := store.Open(ctx, url, store.Options{MaxConns: 8, PopConns: 3})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	waitIdle(t, st.PopPool(), 3)
	require.Equal(t, [][]int64{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, generic(t, st.PopPool()))

	pushN(t, st, "planned", "p", 0, 3)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("planned"), Max: 10})
	require.NoError(t, err)
	require.Len(t, ms, 3)
	ran := int64(0)
	for _, counts := range generic(t, st.PopPool()) {
		require.Len(t, counts, 3)
		ran += counts[0] - 1 // popSQL, the pop of any partition
	}
	require.Positive(t, ran, "the pop ran the statement planned ahead")
}
