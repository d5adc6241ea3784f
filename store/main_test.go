package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func testURL(t testing.TB) string { return pgtest.URL(t) }

func newStore(t testing.TB) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, testURL(t), store.Options{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))
	return st
}
