package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// roundTrips counts what a store sends: statements on their own (each its
// own transaction outside BEGIN) and batches (each one transaction: pgx
// ends a batch with one Sync).
type roundTrips struct {
	mu         sync.Mutex
	inBatch    map[*pgx.Conn]bool
	statements atomic.Int64
	batches    atomic.Int64
	sql        []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inBatch[conn] {
		r.statements.Add(1)
		r.sql = append(r.sql, data.SQL)
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inBatch == nil {
		r.inBatch = map[*pgx.Conn]bool{}
	}
	r.inBatch[conn] = true
	r.batches.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *roundTrips) TraceBatchEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inBatch, conn)
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statements.Store(0)
	r.batches.Store(0)
	r.sql = nil
}

// An idle database costs one round trip and one transaction a sweep,
// however many queues and partitions it holds and whatever their
// settings: no statement per queue, none per partition. (Before, a sweep
// sent one dedup DELETE per queue and, per queue with retention, read
// every partition.)
func TestSweepIdleIsOneTransaction(t *testing.T) {
	t.Parallel()
	var trips roundTrips
	ctx := ctxT(t)
	st, err := store.Open(ctx, testURL(t), store.Options{MaxConns: 4, Tracer: &trips})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))

	// 300 queues of 3 partitions: retention that nothing has reached yet,
	// a group that read everything, dedup ids inside their window, and
	// queues with defaults.
	for i := range 300 {
		q := fmt.Sprintf("q%03d", i)
		switch i % 3 {
		case 0:
			configure(t, st, q, domain.ConfigPatch{CompletedRetentionS: i64(3600), MaxAgeS: i64(7200)})
		case 1:
			configure(t, st, q, domain.ConfigPatch{DedupWindowS: i64(3600)})
		}
		r := domain.PushParams{Queue: domain.Global(q)}
		for p := range 3 {
			r.Messages = append(r.Messages, domain.PushMessage{Partition: fmt.Sprint("p", p), ID: fmt.Sprint("id-", p), Data: []byte("1"), Encoding: domain.EncodingJSON})
		}
		require.NoError(t, push(t, st, r)[0].Err)
		if i%3 == 0 {
			_, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global(q), Group: "g", Max: 10, Partitions: 3, AutoAck: true})
			require.NoError(t, err)
		}
	}
	// The first sweeps also maintain the segment slots (every 5 s), and
	// take the ready set's rows out: the pushes' rows spread to no group
	// (g read everything, the other queues have none), and g's 300 rows,
	// made with it, trimmed. The pushes' rows are the 300 of the queues
	// that deduplicate, whose partitions are made before their pushes:
	// the others' pushes made their partitions in a queue with no group,
	// which puts none in the ready set (insertFreshSQL).
	require.Equal(t, int64(600), trimmedAll(t, st))

	trips.reset()
	const sweeps = 10
	for range sweeps {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, store.SweepStats{ReadyIdle: true}, s, "nothing can be deleted yet, nor read of the ready set")
	}
	require.Equal(t, int64(sweeps), trips.batches.Load(), "one batch a sweep")
	require.Zero(t, trips.statements.Load(), "and no statement besides: %q", trips.sql)

	var ids int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT coalesce(sum(cardinality(ids)), 0) FROM comb_dedup_sets`).Scan(&ids))
	require.Equal(t, 300, ids, "ids inside their window stay")
}

// The time index never strands a partition: with pushes, pops, acks and
// sweeps running together, every partition's low_created_at is NULL when
// it retains nothing and otherwise no later than its oldest retained
// segment (within one push transaction's length), and once the pushes
// stop, max_age_s and completed_retention_s delete everything.
func TestRetentionTimeIndexUnderLoad(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "age", domain.ConfigPatch{MaxAgeS: i64(1)})
	configure(t, st, "done", domain.ConfigPatch{CompletedRetentionS: i64(1)})

	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, q := range []string{"age", "done"} {
		for w := range 3 {
			wg.Go(func() {
				for i := 0; lctx.Err() == nil; i++ {
					r := domain.PushParams{Queue: domain.Global(q)}
					for p := range 1 + i%3 {
						r.Messages = append(r.Messages, domain.PushMessage{Partition: fmt.Sprint("p", (w+p+i)%5), Data: []byte("1"), Encoding: domain.EncodingJSON})
					}
					// With ctx, not lctx: a push cut off by the stop could
					// still commit after the drain below had found nothing.
					if _, err := st.Push(ctx, []domain.PushParams{r}); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(time.Duration(i%7) * 3 * time.Millisecond)
				}
			})
		}
		wg.Go(func() { // the consumer that completes what "done" retains
			for lctx.Err() == nil {
				_, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global(q), Group: "g", Max: 50, Partitions: 5, AutoAck: true})
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	sctx, stopSweeper := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() { defer close(swept); st.RunSweeper(sctx, 20*time.Millisecond) }()
	defer func() { stopSweeper(); <-swept }()

	invariant := func() {
		t.Helper()
		var bad []string
		rows, err := st.Pool().Query(ctx, `
			SELECT p.name, p.low_offset, p.next_offset, p.low_created_at::text, s.created_at::text
			FROM comb_partitions p LEFT JOIN comb_segments s ON s.partition_id = p.id AND s.base_offset = p.low_offset
			WHERE (p.next_offset = p.low_offset AND p.low_created_at IS NOT NULL)
			   OR (p.next_offset > p.low_offset AND (p.low_created_at IS NULL OR s.created_at IS NULL
			       OR p.low_created_at > s.created_at + interval '1 second'))`)
		require.NoError(t, err)
		for rows.Next() {
			var name, low, seg *string
			var lo, next int64
			require.NoError(t, rows.Scan(&name, &lo, &next, &low, &seg))
			bad = append(bad, fmt.Sprintf("%s [%d,%d) low_created_at %v, oldest segment %v", *name, lo, next, deref(low), deref(seg)))
		}
		require.NoError(t, rows.Err())
		require.Empty(t, bad, "partitions the time index would miss")
	}
	for range 15 {
		time.Sleep(200 * time.Millisecond)
		invariant()
	}
	stopLoad()
	wg.Wait()
	invariant()
	// The group completes what "done" still holds.
	for {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("done"), Group: "g", Max: 1000, Partitions: 5, AutoAck: true})
		require.NoError(t, err)
		if len(ms) == 0 {
			break
		}
	}

	// Past both retentions, everything goes: nothing was left behind.
	require.Eventually(t, func() bool {
		var retained int64
		if err := st.Pool().QueryRow(ctx, `SELECT coalesce(sum(next_offset - low_offset), 0) FROM comb_partitions`).Scan(&retained); err != nil {
			t.Log(err)
			return false
		}
		return retained == 0
	}, 15*time.Second, 100*time.Millisecond, "retention deletes every message once it is old enough")
	var stale int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_partitions WHERE low_created_at IS NOT NULL`).Scan(&stale))
	require.Zero(t, stale, "a partition that retains nothing has no low_created_at")
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// The sweeper moves low_created_at to the push time of the first segment
// it keeps, exactly, and to NULL when nothing is left.
func TestSweepMovesLowCreatedAt(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{MaxAgeS: i64(1)})
	lowCreated := func() (low *time.Time, first *time.Time) {
		t.Helper()
		require.NoError(t, st.Pool().QueryRow(ctx, `
			SELECT p.low_created_at, (SELECT s.created_at FROM comb_segments s WHERE s.partition_id = p.id AND s.base_offset = p.low_offset)
			FROM comb_partitions p`).Scan(&low, &first))
		return low, first
	}
	pushN(t, st, "q", "p", 0, 2)
	low, first := lowCreated()
	require.NotNil(t, low)
	require.Equal(t, *first, *low, "a push into an empty partition starts it")
	time.Sleep(400 * time.Millisecond)
	pushN(t, st, "q", "p", 2, 1)
	low2, _ := lowCreated()
	require.Equal(t, *low, *low2, "a push into a partition that retains some keeps it")

	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		return s.Messages == 2
	}, 5*time.Second, 20*time.Millisecond)
	low, first = lowCreated()
	require.NotNil(t, low)
	require.NotNil(t, first)
	require.Equal(t, *first, *low, "the first kept segment's push time")

	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		return s.Messages == 1
	}, 5*time.Second, 20*time.Millisecond)
	low, first = lowCreated()
	require.Nil(t, low, "a partition that retains nothing")
	require.Nil(t, first)
}

// AnyReady answers for many groups of many queues in one statement: yes
// where a pop may find messages (unleased, or leased past its lease), no
// where everything is leased or consumed.
func TestAnyReady(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "a", "p1", 0, 2)
	pushN(t, st, "a", "p2", 0, 1)
	pushN(t, st, "b", "p1", 0, 1)
	tenant := domain.QueueRef{Tenant: "T", Name: "a"}
	require.NoError(t, push(t, st, domain.PushParams{Queue: tenant, Messages: []domain.PushMessage{{Partition: "p1", Data: []byte("1"), Encoding: domain.EncodingJSON}}})[0].Err)

	pop := func(q domain.QueueRef, group, partition string, leaseMS int64, autoAck bool) {
		t.Helper()
		ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: group, Partition: partition, Max: 10, LeaseMS: leaseMS, AutoAck: autoAck})
		require.NoError(t, err)
		require.NotEmpty(t, ms)
	}
	pop(domain.Global("a"), "leased", "p1", 60000, false)   // p1 leased, p2 ready
	pop(domain.Global("a"), "done", "p1", 0, true)          // p1 consumed
	pop(domain.Global("a"), "done", "p2", 0, true)          // and p2
	pop(domain.Global("a"), "expiring", "p1", 100, false)   // its lease ends soon
	pop(domain.Global("a"), "expiring", "p2", 60000, false) // this one not
	pop(domain.Global("b"), "g", "p1", 0, true)
	pop(tenant, "g", "", 60000, false) // the tenant's "a": leased
	time.Sleep(150 * time.Millisecond)

	checks := []domain.ReadyCheck{
		{Queue: domain.Global("a"), Group: "leased"},                  // p2
		{Queue: domain.Global("a"), Group: "leased", Partition: "p1"}, // leased
		{Queue: domain.Global("a"), Group: "leased", Partition: "p2"},
		{Queue: domain.Global("a"), Group: "done"},
		{Queue: domain.Global("a"), Group: "expiring", Partition: "p1"}, // lease over
		{Queue: domain.Global("a"), Group: "expiring", Partition: "p2"},
		{Queue: domain.Global("a"), Group: "expiring"},
		{Queue: domain.Global("b"), Group: "g"},
		{Queue: domain.Global("b"), Group: "g", Partition: "nope"},
		{Queue: tenant, Group: "g"},                // not the global "a"'s
		{Queue: domain.Global("gone"), Group: "g"}, // a pop there answers 404
	}
	got, err := st.AnyReady(ctx, checks)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true, false, true, false, true, false, false, false, true}, got)
	got, err = st.AnyReady(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}
