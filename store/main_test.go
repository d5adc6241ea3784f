package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/store"
)

// TEMPORARY until internal/pgtest lands.
func testURL(t testing.TB) string {
	base := os.Getenv("COMB_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("no PostgreSQL")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer conn.Close(ctx)
	schema := fmt.Sprintf("t_%d", rand.Int64())
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	})
	u, _ := url.Parse(base)
	qs := u.Query()
	qs.Set("search_path", schema)
	u.RawQuery = qs.Encode()
	return u.String()
}

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
