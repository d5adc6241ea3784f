package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(Wrap(m))
}

// TestSearchPath checks that the URL's search_path reaches the session:
// pgx must send the unknown URL parameter as a run-time setting.
func TestSearchPath(t *testing.T) {
	t.Parallel()
	u := URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var schema string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	require.Regexp(t, `^t_testsearchpath_[0-9a-f]{12}$`, schema)
}

// TestParallelSchemas migrates two stores at once, each in its own schema,
// and checks that neither sees the other's data.
func TestParallelSchemas(t *testing.T) {
	t.Parallel()
	schemas := make([]string, 2)
	for i := range schemas {
		t.Run("store", func(t *testing.T) {
			t.Parallel()
			u := URL(t)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			st, err := store.Open(ctx, u, store.Options{})
			require.NoError(t, err)
			t.Cleanup(st.Close)
			require.NoError(t, st.Migrate(ctx))
			require.NoError(t, st.Migrate(ctx), "migrate is idempotent")

			var schema string
			var tables int
			require.NoError(t, st.Pool().QueryRow(ctx, `SELECT current_schema(),
				(SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())`).Scan(&schema, &tables))
			require.Positive(t, tables)
			schemas[i] = schema

			_, err = st.Pool().Exec(ctx, `INSERT INTO comb_queues (name, config) VALUES ($1, '{}')`, schema)
			require.NoError(t, err)
			var names []string
			rows, err := st.Pool().Query(ctx, `SELECT name FROM comb_queues`)
			require.NoError(t, err)
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Equal(t, []string{schema}, names)
		})
	}
	t.Cleanup(func() { require.NotEqual(t, schemas[0], schemas[1]) })
}

func TestSchemaDropped(t *testing.T) {
	t.Parallel()
	var schema string
	t.Run("inner", func(t *testing.T) {
		u := URL(t)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, u)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	})
	var n int
	require.NoError(t, admin.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n))
	require.Zero(t, n, "schema %s outlived its test", schema)
}

func TestWithSearchPath(t *testing.T) {
	t.Parallel()
	got, err := withSearchPath("postgres://u:p@h:5/db?sslmode=disable", "s1")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p@h:5/db?search_path=s1&sslmode=disable", got)
	got, err = withSearchPath("host=h dbname=db", "s1")
	require.NoError(t, err)
	require.Equal(t, "host=h dbname=db search_path=s1", got)
	require.Equal(t, "postgres://u:xxxxx@h/db", redact("postgres://u:secret@h/db"))
}

func TestClusterExported(t *testing.T) {
	t.Parallel()
	if Cluster() == nil {
		t.Skip("using " + EnvURL)
	}
	require.NotZero(t, Cluster().Port())
}
