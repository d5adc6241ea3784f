package store_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// openTraced opens a store on url whose round trips trips counts.
func openTraced(t *testing.T, url string, trips *roundTrips) *store.Store {
	t.Helper()
	return openStore(t, url, store.Options{MaxConns: 4, Tracer: trips})
}

// pushTo pushes one message to each partition named, in one request.
func pushTo(t *testing.T, st *store.Store, queue string, parts ...string) []domain.PushResult {
	t.Helper()
	r := domain.PushParams{Queue: domain.Global(queue)}
	for _, p := range parts {
		r.Messages = append(r.Messages, domain.PushMessage{Partition: p, Data: []byte(`1`), Encoding: domain.EncodingJSON})
	}
	out := push(t, st, r)[0]
	require.NoError(t, out.Err)
	return out.Results
}

// partitionRows counts the rows of a partition name in queue.
func partitionRows(t *testing.T, st *store.Store, queue, name string) int {
	t.Helper()
	var n int
	require.NoError(t, st.Pool().QueryRow(ctxT(t), `
		SELECT count(*) FROM comb_partitions p JOIN comb_queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2`, queue, name).Scan(&n))
	return n
}

// A push to new partitions creates them in its own transaction: one round
// trip, where it took one more for the creation before. It makes no
// cursor; the group's pop makes them, and reads the partitions.
func TestPushCreatesPartitionsInItsTransaction(t *testing.T) {
	t.Parallel()
	var trips roundTrips
	st := openTraced(t, testURL(t), &trips)
	ctx := ctxT(t)
	pushTo(t, st, "q", "p0")
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 10, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 1)

	trips.reset()
	res := pushTo(t, st, "q", "p1", "p2", "p1")
	require.Equal(t, int64(1), trips.batches.Load(), "one round trip: %q", trips.sql)
	require.Zero(t, trips.statements.Load(), "and nothing besides: %q", trips.sql)
	require.Equal(t, []int64{0, 0, 1}, []int64{res[0].Offset, res[1].Offset, res[2].Offset})

	var cursors int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_cursors WHERE group_name = 'g'`).Scan(&cursors))
	require.Equal(t, 1, cursors, "no cursor on the new partitions: the group's pops make them")
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 10, Partitions: 10, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 3, "the group reads them")
}

// A store that starts on partitions another made (a restart, or a second
// bridge) knows them and pushes on their rows; one made elsewhere after
// the store read them is found when its insert does nothing, and the push
// goes on that row too. Either way each name keeps one row and dense
// offsets.
func TestPushFindsPartitionsMadeElsewhere(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	var tripsA, tripsB, tripsC roundTrips
	a := openTraced(t, url, &tripsA)
	b := openTraced(t, url, &tripsB)
	pushTo(t, a, "q", "old")
	pushTo(t, b, "q", "x") // a has read q's partitions already: it does not know x
	res := pushTo(t, a, "q", "x", "x")
	require.Equal(t, []int64{1, 2}, []int64{res[0].Offset, res[1].Offset})
	require.Equal(t, 1, partitionRows(t, a, "q", "x"))
	tripsA.reset()
	pushTo(t, a, "q", "old", "x")
	require.Equal(t, int64(1), tripsA.batches.Load(), "a still knows q's partitions, x among them: %q", tripsA.sql)
	require.Zero(t, tripsA.statements.Load(), "and reads none of them again: %q", tripsA.sql)

	c := openTraced(t, url, &tripsC) // a restart
	pushTo(t, c, "q", "nothing")     // c reads q's partitions
	tripsC.reset()
	res = pushTo(t, c, "q", "old", "x")
	require.Equal(t, []int64{2, 4}, []int64{res[0].Offset, res[1].Offset})
	require.Equal(t, int64(1), tripsC.batches.Load(), "no insert that finds the row taken, no second try: %q", tripsC.sql)
	for _, p := range []string{"old", "x", "nothing"} {
		require.Equal(t, 1, partitionRows(t, c, "q", p), p)
	}

	ms, err := a.Pop(ctxT(t), domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 10, Partitions: 1, Partition: "x", AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 5)
	for i, m := range ms {
		require.Equal(t, int64(i), m.Offset)
	}
}

// A queue with more partitions than the store reads into its cache has
// the names a push misses looked up first; the push makes those that are
// new, in its own transaction, and pushes on the rows of those found.
func TestPushCreatesPartitionsOfABigQueueAfterALookUp(t *testing.T) {
	store.SetPreloadLimit(t, 2) // not parallel: a package variable
	url := testURL(t)
	var tripsA, tripsB roundTrips
	a := openTraced(t, url, &tripsA)
	pushTo(t, a, "q", "p0", "p1", "p2")
	b := openTraced(t, url, &tripsB)
	pushTo(t, b, "q", "p0") // b finds q over the limit
	tripsB.reset()
	res := pushTo(t, b, "q", "p1", "p3", "p1")
	require.Equal(t, []int64{1, 0, 2}, []int64{res[0].Offset, res[1].Offset, res[2].Offset})
	require.Equal(t, int64(1), tripsB.batches.Load(), "one transaction, which makes p3: %q", tripsB.sql)
	require.Contains(t, tripsB.sql, store.PartitionsByNameSQL, "after a look-up of p1 and p3")
	for _, q := range tripsB.sql {
		require.NotContains(t, q, "INSERT", "nothing made before the push")
	}
	require.Equal(t, 1, partitionRows(t, b, "q", "p3"))
	require.Equal(t, 1, partitionRows(t, b, "q", "p1"))

	tripsB.reset()
	res = pushTo(t, b, "q", "p1", "p3")
	require.Equal(t, []int64{3, 1}, []int64{res[0].Offset, res[1].Offset})
	require.Equal(t, int64(1), tripsB.batches.Load())
	require.Zero(t, tripsB.statements.Load(), "both known now: %q", tripsB.sql)
}

// A group made while pushes create partitions reads every message of
// them: it has no cursor on any partition until a pop makes it, so there
// is no race between the two to lose one.
func TestGroupMeetsPartitionsMadeByPushes(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	for round := range 20 {
		queue := "q" + strconv.Itoa(round)
		pushTo(t, st, queue, "first")
		var parts []string
		for i := range 10 {
			parts = append(parts, "p"+strconv.Itoa(i))
		}
		errs := make(chan error, 2)
		go func() {
			_, err := st.Push(ctx, []domain.PushParams{{Queue: domain.Global(queue), Messages: []domain.PushMessage{
				{Partition: parts[0], Data: []byte(`1`), Encoding: domain.EncodingJSON},
			}}})
			for _, p := range parts[1:] {
				if err != nil {
					break
				}
				_, err = st.Push(ctx, []domain.PushParams{{Queue: domain.Global(queue), Messages: []domain.PushMessage{{Partition: p, Data: []byte(`1`), Encoding: domain.EncodingJSON}}}})
			}
			errs <- err
		}()
		var read atomic.Int64
		go func() {
			ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global(queue), Group: "g", Max: 1, AutoAck: true})
			read.Add(int64(len(ms)))
			errs <- err
		}()
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		for {
			ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global(queue), Group: "g", Max: 100, Partitions: 100, AutoAck: true})
			require.NoError(t, err)
			if len(ms) == 0 {
				break
			}
			read.Add(int64(len(ms)))
		}
		require.Equal(t, int64(11), read.Load(), "round %d: every message", round)
	}
}

// A queue deleted by another store (bridge) under this one's cache is
// made again by this one's next push, whether the push names partitions
// it knew or new ones.
func TestPushRecreatesAQueueDeletedElsewhere(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	var tripsA, tripsB roundTrips
	a := openTraced(t, url, &tripsA)
	b := openTraced(t, url, &tripsB)
	ctx := ctxT(t)
	for round, parts := range [][]string{{"old"}, {"old", "new"}, {"newer"}} {
		pushTo(t, a, "q", "old")
		require.NoError(t, b.Delete(ctx, domain.Global("q")), "round %d", round)
		res := pushTo(t, a, "q", parts...)
		for i, r := range res {
			require.Equal(t, int64(0), r.Offset, "round %d: %s in a new queue", round, parts[i])
		}
		for _, p := range parts {
			require.Equal(t, 1, partitionRows(t, a, "q", p), "round %d: %s", round, p)
		}
	}
}

// A push counts what it stores in the partitions it makes as it makes
// them (insertFreshSQL), and puts them in the ready set, so that their
// rows read like those of partitions pushed to again; a partition it makes
// for a request that a limit refused is made empty.
func TestPushCountsWhatItStoresInPartitionsItMakes(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{MaxMessages: i64(4)})
	newGroup(t, st, "q", "early", domain.Start{Kind: domain.StartNew})
	pushTo(t, st, "q", "seen") // q's partitions are read: new ones are made by pushes
	q := domain.Global("q")
	first := []domain.PushMessage{msg("a", "", "11"), msg("a", "", "2"), msg("b", "", "333")}
	outs := push(t, st,
		domain.PushParams{Queue: q, Messages: first},
		domain.PushParams{Queue: q, Messages: []domain.PushMessage{msg("c", "", "4")}})
	require.NoError(t, outs[0].Err)
	require.Equal(t, []domain.PushResult{
		{Partition: "a", Offset: 0, Status: domain.Stored},
		{Partition: "a", Offset: 1, Status: domain.Stored},
		{Partition: "b", Offset: 0, Status: domain.Stored},
	}, outs[0].Results)
	require.ErrorIs(t, outs[1].Err, domain.ErrLimit, "seen's, a's and b's four messages fill q")

	type row struct {
		next, bytes  int64
		since, ready bool
	}
	read := func(name string) row {
		var r row
		require.NoError(t, st.Pool().QueryRow(ctx, `
			SELECT p.next_offset, p.retained_bytes, p.low_created_at IS NOT NULL,
			       EXISTS (SELECT 1 FROM comb_ready r WHERE r.partition_id = p.id AND r.group_name = '')
			FROM comb_partitions p JOIN comb_queues q ON q.id = p.queue_id
			WHERE q.name = 'q' AND p.name = $1`, name).Scan(&r.next, &r.bytes, &r.since, &r.ready), name)
		return r
	}
	size := func(ms ...domain.PushMessage) (n int64) {
		for _, m := range ms {
			n += int64(m.Size())
		}
		return n
	}
	require.Equal(t, row{2, size(first[:2]...), true, true}, read("a"))
	require.Equal(t, row{1, size(first[2]), true, true}, read("b"))
	require.Equal(t, row{0, 0, false, false}, read("c"), "made for the refused request, and empty")

	configure(t, st, "q", domain.ConfigPatch{MaxMessages: i64(10)})
	require.Equal(t, []int64{2}, pushN(t, st, "q", "a", 5, 1), "then pushed to like any other")
	require.Equal(t, []int64{0}, pushN(t, st, "q", "c", 6, 1))
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "early", Max: 10, Partitions: 10, AutoAck: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"1", "11", "2", "5", "333", "6"}, datas(ms))
}

// The partitions a push makes in a queue with no group get no ready row,
// which the sweeper would only delete: a group made later finds their
// messages by the rows it writes itself, from where it starts.
func TestPartitionsOfAQueueWithoutGroupsAreNotMarkedReady(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushTo(t, st, "q", "a", "b")
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready`))
	q := domain.Global("q")
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "all", Max: 10, Partitions: 10, AutoAck: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"1", "1"}, datas(ms), "a group from the oldest message reads both")
	newGroup(t, st, "q", "new", domain.Start{Kind: domain.StartNew})
	pushTo(t, st, "q", "a", "c") // c is new, and q has groups now
	require.Equal(t, 2, count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = ''`), "a's and c's")
	var got []string
	for range 5 {
		ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "new", Max: 10, Partitions: 10, AutoAck: true})
		require.NoError(t, err)
		for _, m := range ms {
			got = append(got, m.Partition)
		}
	}
	require.ElementsMatch(t, []string{"a", "c"}, got, "a's second message and c's")
}

// Two pushes of one store that make the same partition at the same moment
// share the id the store reserved for it: the first to commit makes the
// row, counted with its messages, and the second, whose insert waited for
// the first and did nothing, then allocates its offsets on that row like
// on any other, after the first's.
func TestPushesMakingOnePartitionTogether(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushTo(t, st, "q", "seen")
	q := domain.Global("q")

	// Hold "seen" so that push A, which makes "x", waits with "x" made
	// and not committed.
	hold, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer hold.Rollback(ctx) //nolint:errcheck // released below
	_, err = hold.Exec(ctx, `SELECT 1 FROM comb_partitions WHERE name = 'seen' FOR UPDATE`)
	require.NoError(t, err)
	waiting := func(n int) func() bool {
		return func() bool {
			var got int
			require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got))
			return got == n
		}
	}
	results := func(reqs ...domain.PushMessage) chan []domain.PushResult {
		ch := make(chan []domain.PushResult, 1)
		go func() {
			outs, err := st.Push(ctx, []domain.PushParams{{Queue: q, Messages: reqs}})
			if err == nil {
				err = outs[0].Err
			}
			if err != nil {
				t.Error(err)
			}
			ch <- outs[0].Results
		}()
		return ch
	}
	a := results(msg("seen", "", "1"), msg("x", "", "2"), msg("x", "", "3"))
	require.Eventually(t, waiting(1), 10*time.Second, 5*time.Millisecond, "A waits for seen")
	b := results(msg("x", "", "4"))
	require.Eventually(t, waiting(2), 10*time.Second, 5*time.Millisecond, "B's insert of x waits for A's")
	require.NoError(t, hold.Rollback(ctx))

	ra, rb := <-a, <-b
	require.Equal(t, []int64{1, 0, 1}, []int64{ra[0].Offset, ra[1].Offset, ra[2].Offset})
	require.Equal(t, []int64{2}, []int64{rb[0].Offset}, "after A's two, not over them")
	require.Equal(t, 1, partitionRows(t, st, "q", "x"))
	var next int64
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT next_offset FROM comb_partitions WHERE name = 'x'`).Scan(&next))
	require.Equal(t, int64(3), next)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 10, Partition: "x", AutoAck: true})
	require.NoError(t, err)
	require.Equal(t, []string{"2", "3", "4"}, datas(ms))
}

// No partition outlives its queue, though no foreign key ties them
// (migration 0016): a queue's delete takes its partitions, and a push
// that makes partitions of a queue deleted under its cache, in its own
// transaction or in one before it (a queue that deduplicates), makes
// none in the deleted queue.
func TestNoPartitionOutlivesItsQueue(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	a := openTraced(t, url, &roundTrips{})
	b := openTraced(t, url, &roundTrips{})
	ctx := ctxT(t)
	orphans := func() int {
		var n int
		require.NoError(t, a.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_partitions p
			WHERE NOT EXISTS (SELECT 1 FROM comb_queues q WHERE q.id = p.queue_id)`).Scan(&n))
		return n
	}
	for _, dedup := range []int64{0, 60} {
		configure(t, a, "q", domain.ConfigPatch{DedupWindowS: i64(dedup)})
		pushTo(t, a, "q", "old")
		require.NoError(t, b.Delete(ctx, domain.Global("q")))
		require.Zero(t, orphans(), "dedup %d: the delete took q's partitions", dedup)
		req := []domain.PushParams{{Queue: domain.Global("q"), Messages: []domain.PushMessage{msg("new", "n1", "1")}}}
		outs, err := a.Push(ctx, req)
		require.NoError(t, err)
		if dedup > 0 {
			// The partitions' own transaction finds q gone and refuses
			// the push; the store forgets q, and the next push makes it.
			require.ErrorIs(t, outs[0].Err, domain.ErrNotFound)
			require.Zero(t, orphans(), "dedup %d", dedup)
			outs, err = a.Push(ctx, req)
			require.NoError(t, err)
		}
		require.NoError(t, outs[0].Err)
		require.Equal(t, int64(0), outs[0].Results[0].Offset, "dedup %d: in q made again", dedup)
		require.Zero(t, orphans(), "dedup %d", dedup)
		require.Equal(t, 1, partitionRows(t, a, "q", "new"))
		require.NoError(t, a.Delete(ctx, domain.Global("q")))
	}
}

// Migration 0016's down file puts the foreign key back over the rows the
// trigger kept tidy, and a queue's delete still takes its partitions.
func TestPartitionsWithoutFKDownMigration(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushTo(t, st, "q", "a", "b")
	pushTo(t, st, "r", "a")
	tx := downMigrated(t, st, "0016_partitions_without_fk.down.sql")
	_, err := tx.Exec(ctx, `DELETE FROM comb_queues WHERE name = 'q'`)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM comb_partitions`).Scan(&n))
	require.Equal(t, 1, n, "r's, by the cascade again")
	_, err = tx.Exec(ctx, `INSERT INTO comb_partitions (queue_id, name) VALUES (-1, 'x')`)
	require.Error(t, err, "the key checks a partition's queue again")
}
