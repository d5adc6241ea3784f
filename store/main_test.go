package store_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func testURL(t testing.TB) string { return pgtest.URL(t) }

func newStore(t testing.TB) *store.Store {
	t.Helper()
	return openStore(t, testURL(t), store.Options{MaxConns: 8})
}

// openStore opens a store on url with opts, migrated, closed when the
// test ends: several of them on one url are brokers sharing a database.
func openStore(t testing.TB, url string, opts store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, url, opts)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))
	return st
}

// downMigrated runs migration file's down file in a transaction of st's
// that it returns, rolled back when the test ends.
func downMigrated(t *testing.T, st *store.Store, file string) pgx.Tx {
	t.Helper()
	ctx := ctxT(t)
	down, err := os.ReadFile("migrations/" + file)
	require.NoError(t, err)
	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, string(down))
	require.NoError(t, err)
	return tx
}
