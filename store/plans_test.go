package store_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// TestHotStatementsPlanOnce pins that pushes (with and without ids to
// deduplicate, with delays), acks and pops of a named partition run
// generic plans, planned once per connection: PostgreSQL's own choice
// planned the push's statements anew on every run (keyedPlansSQL). With
// one connection in each pool every statement runs on the one the test
// then asks, and pg_prepared_statements counts its plans.
func TestHotStatementsPlanOnce(t *testing.T) {
	ctx := ctxT(t)
	st, err := store.Open(ctx, testURL(t), store.Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))
	configure(t, st, "d", domain.ConfigPatch{DedupWindowS: i64(60)})

	const runs = 12
	for i := range runs {
		part := "p" + strconv.Itoa(i%3)
		pushN(t, st, "q", part, i, 1)
		out := push(t, st, domain.PushParams{Queue: domain.Global("d"), Messages: []domain.PushMessage{
			{Partition: part, ID: "id-" + strconv.Itoa(i), Data: []byte(`1`), Encoding: domain.EncodingJSON},
		}}, domain.PushParams{Queue: domain.Global("h"), Messages: []domain.PushMessage{
			{Partition: part, Data: []byte(`1`), Encoding: domain.EncodingJSON, DelayMS: 60_000},
		}})
		for _, o := range out {
			require.NoError(t, o.Err)
			require.Equal(t, domain.Stored, o.Results[0].Status)
		}

		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Partition: part, Max: 1})
		require.NoError(t, err)
		require.Len(t, ms, 1)
		res := ack(t, st, "q", "", domain.Ack{Partition: part, Offset: ms[0].Offset, Lease: ms[0].Lease, Status: domain.AckCompleted})
		require.True(t, res[0].OK, res[0].Error)
		ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Candidates: []string{"p0", "p1", "p2"}, Max: 1})
		require.NoError(t, err)
		require.Empty(t, ms)
	}

	ran := map[string]string{
		"push lock": "main", "push alloc": "main", "push insert": "main", "push holds": "main",
		"dedup lock": "main", "dedup read": "main", "dedup remember": "main", "ack": "main",
		"pop one partition": "pop", "pop candidates": "pop",
	}
	conns := map[string]*pgxpool.Conn{}
	for name, pool := range map[string]*pgxpool.Pool{"main": st.Pool(), "pop": st.PopPool()} {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		conns[name] = c
	}
	for name, pool := range ran {
		var generic, custom int64
		err := conns[pool].QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
			store.KeyedStatements[name]).Scan(&generic, &custom)
		require.NoError(t, err, "%s: not prepared on the %s pool's connection", name, pool)
		require.Zero(t, custom, "%s: planned for its parameters", name)
		require.GreaterOrEqual(t, generic, int64(runs), "%s", name)
	}
}

// TestHotPlansByKey pins that the generic plans of the statements that
// keyedPlansSQL opens read every table by key, on the tables where
// PostgreSQL likes a sequential scan best: a fresh queue of 200
// partitions, each table a few pages, just analyzed.
func TestHotPlansByKey(t *testing.T) {
	ctx := ctxT(t)
	st := newStore(t)
	r := domain.PushParams{Queue: domain.Global("q")}
	for i := range 200 {
		r.Messages = append(r.Messages, domain.PushMessage{Partition: "p" + strconv.Itoa(i), Data: []byte(`1`), Encoding: domain.EncodingJSON})
	}
	require.NoError(t, push(t, st, r)[0].Err)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.NotEmpty(t, ms)

	conn, err := st.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `ANALYZE comb_partitions, comb_cursors, comb_segments, comb_holds, comb_dedup_sets, comb_ready`)
	require.NoError(t, err)
	for name, sql := range store.KeyedStatements {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, store.KeyedPlansSQL)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `PREPARE hot AS `+sql)
		require.NoError(t, err, name)
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = 'hot'`).Scan(&n))
		nulls := strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ")
		rows, err := tx.Query(ctx, `EXPLAIN EXECUTE hot(`+nulls+`)`)
		require.NoError(t, err, name)
		var plan strings.Builder
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		_, err = tx.Exec(ctx, `DEALLOCATE hot`)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		for _, bad := range []string{"Seq Scan", "Hash Join", "Merge Join"} {
			require.NotContains(t, plan.String(), bad, "%s:\n%s", name, plan.String())
		}
		// A pop makes its missing cursors (and takes its group's row)
		// before it locks any, as a one-time filter of cand on made
		// (madeFirst): the order DeleteGroup takes them in.
		if strings.HasPrefix(name, "pop ") {
			s := plan.String()
			from, to := strings.Index(s, "CTE cand"), strings.Index(s, "CTE alloc")
			require.True(t, from >= 0 && to > from, "%s:\n%s", name, s)
			cand := s[from:to]
			require.Contains(t, cand, "CTE Scan on made", "%s:\n%s", name, cand)
			require.Regexp(t, `One-Time Filter: \(\$\d+ >= 0\)`, cand, "%s:\n%s", name, cand)
			require.Less(t, strings.Index(cand, "LockRows"), strings.Index(cand, "One-Time Filter"), "%s:\n%s", name, cand)
		}
		// A scan of the ready set reads cursors by key from its rows,
		// never the group's cursors whole (readyCursors).
		if name == "pop any partition" || name == "pop delayed any" || name == "ready checks" {
			require.NotContains(t, plan.String(), "comb_cursors_queue_group", "%s:\n%s", name, plan.String())
		}
		// A pop's scan of the ready set reads it in index order from its
		// position and stops when it has enough: nothing in ready sorts
		// (popScan).
		if name == "pop any partition" || name == "pop delayed any" {
			s := plan.String()
			from, to := strings.Index(s, "CTE ready"), strings.Index(s, "CTE made")
			require.True(t, from >= 0 && to > from, "%s:\n%s", name, s)
			// A hold's lookup (a SubPlan) sorts its one partition's holds.
			ready := withoutSubPlans(s[from:to])
			require.NotContains(t, ready, "Sort", "%s:\n%s", name, ready)
			require.Equal(t, 4, strings.Count(ready, "comb_ready_queue"), "%s:\n%s", name, ready)
		}
	}
}

// withoutSubPlans is an EXPLAIN's text without its SubPlans' lines.
func withoutSubPlans(plan string) string {
	var out strings.Builder
	skip := -1 // the indentation of the SubPlan being left out
	for line := range strings.Lines(plan) {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if skip >= 0 && indent > skip {
			continue
		}
		skip = -1
		if strings.HasPrefix(strings.TrimLeft(line, " "), "SubPlan") {
			skip = indent
			continue
		}
		out.WriteString(line)
	}
	return out.String()
}

// rowsRead is how many rows a plan (EXPLAIN (ANALYZE, FORMAT JSON)) read
// of relation, over every scan of it whose alias starts with alias.
func rowsRead(t *testing.T, plan []byte, relation, alias string) int {
	t.Helper()
	type node struct {
		Relation string  `json:"Relation Name"`
		Alias    string  `json:"Alias"`
		Rows     float64 `json:"Actual Rows"`
		Loops    float64 `json:"Actual Loops"`
		Plans    []node  `json:"Plans"`
	}
	var root []struct{ Plan node }
	require.NoError(t, json.Unmarshal(plan, &root), "%s", plan)
	read := 0
	var walk func(n node)
	walk = func(n node) {
		if n.Relation == relation && strings.HasPrefix(n.Alias, alias) {
			read += int(n.Rows * n.Loops)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(root[0].Plan)
	return read
}

// scanPlan runs a pop of group on queue that names no partition, scanning
// from after partition id from, as the store runs it (a generic plan,
// keyedPlansSQL) under EXPLAIN (ANALYZE, FORMAT JSON), in a transaction
// it rolls back, and returns the plan.
func scanPlan(t *testing.T, st *store.Store, queue, group string, from int64) []byte {
	t.Helper()
	ctx := ctxT(t)
	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var qid int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM comb_queues WHERE name = $1`, queue).Scan(&qid))
	_, err = tx.Exec(ctx, store.KeyedPlansSQL)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE scan AS `+store.KeyedStatements["pop any partition"])
	require.NoError(t, err)
	var plan []byte
	require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE scan(%d, '%s', %d, 1, 1, 't', true, 1000)`,
		qid, strings.ReplaceAll(group, "'", "''"), from)).Scan(&plan))
	_, err = tx.Exec(ctx, `DEALLOCATE scan`) // a prepared statement outlives the transaction
	require.NoError(t, err)
	return plan
}
