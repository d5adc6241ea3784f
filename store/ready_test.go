package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// groupCursorsSQL is every group's cursor on every partition of its
// queue, a missing one (cursors are made lazily) where the store reads it
// (groupAt): at the end for a group from the end, at the first segment
// pushed at or after the time for a group from a time (read from the
// segments, without the store's shortcuts), at offset 0 for any other.
const groupCursorsSQL = `(
    SELECT p.id AS partition_id, g.name AS group_name,
           coalesce(c.committed, CASE WHEN g.from_end THEN p.next_offset
               WHEN g.from_time IS NOT NULL THEN coalesce((SELECT min(s.base_offset) FROM comb_segments s
                   WHERE s.partition_id = p.id AND s.base_offset >= p.low_offset AND s.created_at >= g.from_time), p.next_offset)
               ELSE 0 END) AS committed
    FROM comb_groups g JOIN comb_partitions p ON p.queue_id = g.queue_id
    LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = g.name)`

// uncoveredSQL counts the cursors short of their partition's end with
// neither their group's ready row nor the partition's row of a push (any
// group, the empty name): what the ready set's invariant forbids at every commit
// (store/ready.go). One statement reads one snapshot, so it may run at
// any time.
const uncoveredSQL = `
SELECT count(*) FROM ` + groupCursorsSQL + ` c JOIN comb_partitions p ON p.id = c.partition_id
WHERE greatest(c.committed, p.low_offset) < p.next_offset
  AND NOT EXISTS (SELECT 1 FROM comb_ready r WHERE r.partition_id = p.id AND r.group_name IN (c.group_name, ''))
  AND NOT EXISTS (SELECT 1 FROM comb_groups g WHERE g.queue_id = p.queue_id AND g.name = c.group_name
                  AND p.name > g.unmarked_after)`

// orphanCursorsSQL counts the cursors whose group does not exist.
const orphanCursorsSQL = `
SELECT count(*) FROM comb_cursors c
WHERE NOT EXISTS (SELECT 1 FROM comb_groups g WHERE g.queue_id = c.queue_id AND g.name = c.group_name)`

// staleRowsSQL counts the ready rows of groups at their partition's end
// (or gone), and the rows of pushes (the empty name), which a sweep spreads: what a
// sweep with nothing running beside it must leave none of.
const staleRowsSQL = `
SELECT count(*) FROM comb_ready r JOIN comb_partitions p ON p.id = r.partition_id
WHERE r.group_name = '' OR NOT EXISTS (SELECT 1 FROM ` + groupCursorsSQL + ` c
                  WHERE c.partition_id = p.id AND c.group_name = r.group_name
                    AND greatest(c.committed, p.low_offset) < p.next_offset)`

func count(t *testing.T, st *store.Store, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, st.Pool().QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// sweepAll sweeps until two sweeps have reported nothing more to do and
// taken no row out: a group's row is trimmed, and a push's spread to the
// groups, on the second look (readySeenAgain), a round of windows after
// the first. It returns how many rows they took out (trimmed or spread)
// and whether one of them vacuumed the set.
func sweepAll(t *testing.T, st *store.Store) (ready int64, vacuumed bool) {
	t.Helper()
	for quiet := 0; quiet < 2; {
		s, err := st.Sweep(ctxT(t))
		require.NoError(t, err)
		ready += s.Ready + s.ReadySpread
		vacuumed = vacuumed || s.ReadyVacuumed
		if !s.More && s.Ready+s.ReadySpread == 0 {
			quiet++
		}
	}
	return ready, vacuumed
}

func trimmedAll(t *testing.T, st *store.Store) int64 {
	t.Helper()
	n, _ := sweepAll(t, st)
	return n
}

// Pushes (some handing off to a pop), pops that name no partition, acks,
// abandoned leases, seeks back, new groups from the earliest message and
// sweeps that trim the ready set all run at once, while a checker reads
// the invariant again and again: no cursor is ever short of its end
// without its partition in the ready set. Then the pops, which read only
// the ready set, must have found every message, and a last sweep must
// leave no row of a caught-up partition.
func TestReadySetCoversReadyCursors(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	st.SetMarkWindow(3) // new groups from the oldest message mark in steps
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	q := domain.Global("ready")

	const (
		producers   = 4
		perProducer = 250
		partitions  = 40
		total       = producers * perProducer
	)
	var (
		mu      sync.Mutex
		acked   = map[string]bool{} // group g's messages, by data
		pushing atomic.Int64        // producers still pushing
		checks  atomic.Int64
		trimmed atomic.Int64
	)
	pushing.Store(producers)
	consume := func(ectx context.Context, ms []domain.Message) error {
		if len(ms) == 0 || rand.IntN(8) == 0 {
			return nil // abandoned: the 100 ms lease expires and they come back
		}
		last := map[string]domain.Message{}
		for _, m := range ms {
			last[m.Lease] = m
		}
		var acks []domain.Ack
		for _, m := range last {
			acks = append(acks, domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
		}
		outs, err := st.Ack(ectx, []domain.AckParams{{Queue: q, Group: "g", Acks: acks}})
		if err != nil {
			return err
		}
		if outs[0].Err != nil {
			return outs[0].Err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, res := range outs[0].Results {
			if !res.OK {
				continue
			}
			for _, m := range ms {
				if m.Lease == acks[i].Lease {
					acked[string(m.Data)] = true
				}
			}
		}
		return nil
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == total
	}

	eg, ectx := errgroup.WithContext(ctx)
	for p := range producers {
		eg.Go(func() error {
			defer pushing.Add(-1)
			for i := 0; i < perProducer; {
				r := domain.PushParams{Queue: q}
				for n := 1 + rand.IntN(5); n > 0 && i < perProducer; n-- {
					r.Messages = append(r.Messages, domain.PushMessage{
						Partition: "p" + strconv.Itoa(rand.IntN(partitions)),
						Data:      []byte(fmt.Sprintf("%d-%d", p, i)),
					})
					i++
				}
				var offers []domain.Offer
				if rand.IntN(3) == 0 {
					offers = []domain.Offer{{Pop: domain.PopParams{Queue: q, Group: "g", Max: 5, LeaseMS: 100},
						Partition: r.Messages[0].Partition}}
				}
				outs, handed, err := st.PushOffer(ectx, []domain.PushParams{r}, offers)
				if err != nil {
					return err
				}
				if outs[0].Err != nil {
					return outs[0].Err
				}
				if len(handed) > 0 {
					if err := consume(ectx, handed[0].Messages); err != nil {
						return err
					}
				}
				time.Sleep(time.Duration(rand.IntN(4)) * time.Millisecond)
			}
			return nil
		})
	}
	for range 3 {
		eg.Go(func() error {
			for !done() {
				if err := ectx.Err(); err != nil {
					return err
				}
				ms, err := st.Pop(ectx, domain.PopParams{Queue: q, Group: "g", Max: 1 + rand.IntN(10),
					Partitions: 1 + rand.IntN(3), LeaseMS: 100})
				if errorsIsNotFound(err) {
					continue
				}
				if err != nil {
					return err
				}
				if len(ms) == 0 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				if err := consume(ectx, ms); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// While the producers push: seeks of g back to the start (all its
	// partitions, or one), and other groups made from the earliest
	// message, each popping and acking once.
	eg.Go(func() error {
		for i := 0; pushing.Load() > 0; i++ {
			time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
			if i%2 == 0 {
				part := ""
				if rand.IntN(2) == 0 {
					part = "p" + strconv.Itoa(rand.IntN(partitions))
				}
				_, err := st.Seek(ectx, domain.SeekParams{Queue: q, Group: "g", Partition: part, To: domain.Start{Kind: domain.StartAll}})
				if err != nil && !errorsIsNotFound(err) {
					return err
				}
				continue
			}
			// From the earliest message, or past the newest: a group
			// made beside a push that has not committed yet must still
			// get that push's messages (the sweeper's spread waits for
			// the group's making, ready.go).
			g := "other" + strconv.Itoa(i)
			from := domain.Start{Kind: domain.StartAll}
			if i%4 == 3 {
				from = domain.Start{Kind: domain.StartNew}
			}
			ms, err := st.Pop(ectx, domain.PopParams{Queue: q, Group: g, Max: 20, Partitions: 4, From: from})
			if errorsIsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			var acks []domain.Ack
			for _, m := range ms {
				acks = append(acks, domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
			}
			if len(acks) > 0 {
				if _, err := st.Ack(ectx, []domain.AckParams{{Queue: q, Group: g, Acks: acks}}); err != nil {
					return err
				}
			}
			// Gone again, so that its cursors do not keep every
			// partition ready and the sweeps have rows to trim.
			if err := st.DeleteGroup(ectx, q, g); err != nil && !errorsIsNotFound(err) {
				return err
			}
		}
		return nil
	})
	eg.Go(func() error {
		for !done() {
			s, err := st.Sweep(ectx)
			if err != nil {
				return err
			}
			trimmed.Add(s.Ready)
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		}
		return nil
	})
	eg.Go(func() error {
		for !done() {
			var n int64
			if err := st.Pool().QueryRow(ectx, uncoveredSQL).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("%d cursors short of their end outside the ready set, at check %d", n, checks.Load())
			}
			checks.Add(1)
		}
		return nil
	})
	require.NoError(t, eg.Wait())
	require.Zero(t, count(t, st, uncoveredSQL))
	require.Len(t, acked, total)

	// Quiet now. A last seek may have moved g back after its consumers
	// were done, and a lease may still be out: drain g, and then a sweep
	// leaves no row (the other groups are gone).
	behind := `SELECT count(*) FROM ` + groupCursorsSQL + ` c JOIN comb_partitions p ON p.id = c.partition_id
	           WHERE greatest(c.committed, p.low_offset) < p.next_offset`
	require.Eventually(t, func() bool {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 1000, Partitions: partitions})
		require.NoError(t, err)
		var acks []domain.Ack
		for _, m := range ms {
			acks = append(acks, domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
		}
		if len(acks) > 0 {
			ack(t, st, "ready", "g", acks...)
		}
		return count(t, st, behind) == 0
	}, 10*time.Second, 20*time.Millisecond)
	sweepAll(t, st)
	require.Zero(t, count(t, st, staleRowsSQL))
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready`))
	require.Zero(t, count(t, st, uncoveredSQL))
	// Pops made the other groups' cursors while DeleteGroup deleted them:
	// none outlives its group.
	require.Zero(t, count(t, st, orphanCursorsSQL))
	t.Logf("%d checks, %d ready rows trimmed meanwhile", checks.Load(), trimmed.Load())
}

// A sweep deletes the ready rows of caught-up partitions only, and skips
// those another transaction holds: a push's lock on the partition row, a
// seek's or a new group's on the ready row.
func TestTrimReadySet(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	gone := groupWhilePushing(t, st, "q")
	for _, p := range []string{"a", "b", "c"} {
		pushN(t, st, "q", p, 0, 2)
	}
	gone()
	// A partition without any group's cursor short of its end is caught
	// up: with no group at all, every row goes.
	require.Equal(t, int64(3), trimmedAll(t, st))
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready`))

	// Group g starts at the earliest message: its partitions are ready
	// again.
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 10, Partitions: 3, From: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Len(t, ms, 6)
	require.Equal(t, 3, count(t, st, `SELECT count(*) FROM comb_ready`))
	require.Zero(t, trimmedAll(t, st), "leased, not acked: still short of the end")
	for _, m := range ms {
		if m.Partition != "c" {
			ack(t, st, "q", "g", domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
		}
	}
	pid := func(name string) int64 {
		var id int64
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT id FROM comb_partitions WHERE name = $1`, name).Scan(&id))
		return id
	}

	// a's partition row locked as a push holds it, b's ready row as a
	// seek holds it: the sweep skips both and deletes nothing (c is not
	// caught up).
	hold := func(sql string, id int64) pgx.Tx {
		tx, err := st.Pool().Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, sql, id)
		require.NoError(t, err)
		return tx
	}
	txA := hold(`SELECT 1 FROM comb_partitions WHERE id = $1 FOR UPDATE`, pid("a"))
	txB := hold(`SELECT 1 FROM comb_ready WHERE partition_id = $1 FOR UPDATE`, pid("b"))
	require.Zero(t, trimmedAll(t, st))
	require.NoError(t, txA.Rollback(ctx))
	require.NoError(t, txB.Rollback(ctx))
	require.Equal(t, int64(2), trimmedAll(t, st))
	var left []string
	rows, err := st.Pool().Query(ctx, `SELECT p.name FROM comb_ready r JOIN comb_partitions p ON p.id = r.partition_id`)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, left)

	// A seek back puts the caught-up partitions in again, and a pop that
	// names none finds their messages.
	_, err = st.Seek(ctx, domain.SeekParams{Queue: domain.Global("q"), Group: "g", Partition: "a", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Equal(t, 2, count(t, st, `SELECT count(*) FROM comb_ready`))
	ready, err := st.AnyReady(ctx, []domain.ReadyCheck{{Queue: domain.Global("q"), Group: "g"}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ready)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 10, Partitions: 3})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(ms))
	require.Equal(t, "a", ms[0].Partition)

	// A deleted queue takes its rows along.
	require.NoError(t, st.Delete(ctx, domain.Global("q")))
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready`))
}

// A sweep reads one window of the ready set and the next sweep the next
// one, round the set: its cost is bounded however many partitions are
// ready, and a caught-up partition anywhere is trimmed within a round.
// Not parallel: the window is the package's.
func TestTrimReadySetWindows(t *testing.T) {
	store.SetReadyWindow(t, 8)
	st := newStore(t)
	ctx := ctxT(t)
	gone := groupWhilePushing(t, st, "q")
	for i := range 30 {
		pushN(t, st, "q", fmt.Sprintf("p%02d", i), 0, 1)
	}
	gone()
	// Nothing reads them: every window is stale, and one sweepAll goes
	// through all four back to back.
	require.Equal(t, int64(30), trimmedAll(t, st))

	for i := range 30 {
		pushN(t, st, "q", fmt.Sprintf("p%02d", i), 1, 1)
	}
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 100, Partitions: 30, From: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Len(t, ms, 60)
	// The pushes' rows spread to g, whose rows were there since it was
	// made (from the earliest message): 30 rows out, g's 30 left.
	spread, _ := sweepAll(t, st)
	require.Equal(t, int64(30), spread)
	require.Equal(t, 30, count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = 'g'`))
	require.Equal(t, 30, count(t, st, `SELECT count(*) FROM comb_ready`))
	// Every partition is ready: a sweep reads one window, trims nothing
	// and does not come back at once.
	s, err := st.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, s.Ready)
	require.False(t, s.More)
	// p29 caught up, the last window's: seen within one round, trimmed at
	// the next look, a round later.
	for _, m := range ms {
		if m.Partition == "p29" && m.Offset == 1 {
			ack(t, st, "q", "g", domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
		}
	}
	var trimmed int64
	for range 4 {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		trimmed += s.Ready
	}
	require.Zero(t, trimmed, "the first look")
	for range 4 {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		trimmed += s.Ready
	}
	require.Equal(t, int64(1), trimmed)
	require.Equal(t, 29, count(t, st, `SELECT count(*) FROM comb_ready`))
}

// Once enough rows were trimmed, a sweep vacuums the ready set itself: its
// dead tuples go, not a minute later when autovacuum looks. Not parallel:
// the threshold is the package's.
func TestSweepVacuumsTheReadySet(t *testing.T) {
	store.SetReadyVacuumAt(t, 5)
	st := newStore(t)
	ctx := ctxT(t)
	vacuums := func() int64 {
		var n int64
		require.NoError(t, st.Pool().QueryRow(ctx,
			`SELECT coalesce(vacuum_count, 0) FROM pg_stat_user_tables WHERE relid = 'comb_ready'::regclass`).Scan(&n))
		return n
	}
	before := vacuums()
	gone := groupWhilePushing(t, st, "q")
	for i := range 3 {
		pushN(t, st, "q", fmt.Sprintf("p%d", i), 0, 1)
	}
	gone()
	n, vacuumed := sweepAll(t, st)
	require.Equal(t, int64(3), n)
	require.False(t, vacuumed, "3 rows trimmed, under the threshold")
	for i := range 3 {
		pushN(t, st, "q", fmt.Sprintf("p%d", i), 1, 1)
	}
	n, vacuumed = sweepAll(t, st)
	require.Equal(t, int64(3), n)
	require.True(t, vacuumed, "6 rows trimmed")
	require.Eventually(t, func() bool { return vacuums() > before }, 10*time.Second, 50*time.Millisecond)
}

// A deleted queue's partitions leave the sweeper's memory between its
// looks with their rows: the next window over their ids forgets them.
func TestSweeperForgetsDeletedPartitions(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	gone := groupWhilePushing(t, st, "gone")
	for i := range 5 {
		pushN(t, st, "gone", fmt.Sprintf("p%d", i), 0, 1)
	}
	gone()
	_, err := st.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, st.ReadySeen(), "seen once, caught up (no group)")
	require.NoError(t, st.Delete(ctx, domain.Global("gone")))
	_, err = st.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, st.ReadySeen())
}

// A group that stopped popping keeps its rows in the ready set, and only
// those: the other group's pops read their own rows and the pushes', not
// the partitions the idle group lags on. (With one row a partition, every
// partition the idle group lagged on stayed in the set, and every pop of
// the other group read them all.)
func TestIdleGroupRowsAreNotRead(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("idle")
	configure(t, st, "idle", domain.ConfigPatch{})
	newGroup(t, st, "idle", "idle", domain.Start{})
	newGroup(t, st, "idle", "busy", domain.Start{})
	for i := range 20 {
		pushN(t, st, "idle", fmt.Sprintf("p%02d", i), 0, 2)
	}
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "busy", Max: 100, Partitions: 20, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 40)
	sweepAll(t, st)
	rows := func(group string) int {
		return count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = $1`, group)
	}
	require.Equal(t, 20, rows("idle"))
	require.Zero(t, rows("busy"))
	require.Zero(t, rows(""), "the pushes' rows spread")
	ready, err := st.AnyReady(ctx, []domain.ReadyCheck{{Queue: q, Group: "busy"}, {Queue: q, Group: "idle"}})
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, ready)

	// What a pop of busy reads: none of the set's rows.
	read := func(group string) int {
		return rowsRead(t, scanPlan(t, st, "idle", group, 0), "comb_ready", "r")
	}
	require.Zero(t, read("busy"))
	require.Equal(t, 20, read("idle"))

	// A push makes the partition ready for both again; the idle group
	// still finds everything.
	pushN(t, st, "idle", "p00", 2, 1)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "busy", Max: 100, Partitions: 20, AutoAck: true})
	require.NoError(t, err)
	require.Equal(t, []string{"2"}, datas(ms))
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "idle", Max: 100, Partitions: 20, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 41)
	sweepAll(t, st)
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready`))
}

// The down migration of the ready set by group keeps a row for every
// partition that had one of any group: the invariant of one row a
// partition.
func TestReadyByGroupDownMigration(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "down", domain.ConfigPatch{})
	newGroup(t, st, "down", "a", domain.Start{})
	newGroup(t, st, "down", "b", domain.Start{})
	for _, p := range []string{"x", "y", "z"} {
		pushN(t, st, "down", p, 0, 1)
	}
	sweepAll(t, st)
	pushN(t, st, "down", "x", 1, 1)
	// x: rows of a, b and the push; y and z: rows of a and b.
	require.Equal(t, 7, count(t, st, `SELECT count(*) FROM comb_ready`))
	tx := downMigrated(t, st, "0014_ready_by_group.down.sql")
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(DISTINCT partition_id) FROM comb_ready`).Scan(&n))
	require.Equal(t, 3, n)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM comb_ready`).Scan(&n))
	require.Equal(t, 3, n)
}

// Pops that name no partition go round the ready partitions: with 150
// partitions ready, some by the group's rows, some by pushes' and some
// by both, 150 pops of one message each take one from each partition,
// and the next 150 the same again. Each reads a window of the ready set
// from where the last one leased, not the set whole: its plan (generic,
// as the pop runs it) reads about as many ready rows as it reports.
func TestScanGoesRoundTheReadyPartitions(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("round")
	configure(t, st, "round", domain.ConfigPatch{})
	newGroup(t, st, "round", "g", domain.Start{})
	const n = 150
	name := func(i int) string { return fmt.Sprintf("p%03d", i) }
	r := domain.PushParams{Queue: q}
	for i := range n {
		for k := range 2 {
			r.Messages = append(r.Messages, domain.PushMessage{Partition: name(i), Data: []byte(strconv.Itoa(k)), Encoding: domain.EncodingJSON})
		}
	}
	require.NoError(t, push(t, st, r)[0].Err)
	sweepAll(t, st) // the pushes' rows spread to g's
	for i := range n / 2 {
		pushN(t, st, "round", name(i), 2, 1) // and a push's row again on half
	}
	rows := func(group string) int {
		return count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = $1`, group)
	}
	require.Equal(t, n, rows("g"))
	require.Equal(t, n/2, rows(""))

	round := func(want string, k int) {
		t.Helper()
		seen := map[string]bool{}
		for range k {
			ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 1, Partitions: 1, AutoAck: true})
			require.NoError(t, err)
			require.Len(t, ms, 1)
			require.Equal(t, want, string(ms[0].Data), ms[0].Partition)
			require.False(t, seen[ms[0].Partition], "%s twice in a round", ms[0].Partition)
			seen[ms[0].Partition] = true
		}
	}
	round("0", n)

	// What a pop reads of the set now, every partition ready.
	plan := scanPlan(t, st, "round", "g", 40)
	read := rowsRead(t, plan, "comb_ready", "r")
	require.Positive(t, read, "%s", plan)
	require.LessOrEqual(t, read, 1+64+2, "the ready rows a pop of one partition read, of %d: %s", n+n/2, plan)

	round("1", n)
	round("2", n/2)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 1, Partitions: 1, AutoAck: true})
	require.NoError(t, err)
	require.Empty(t, ms)
}

// A sweep says when the window of the ready set it read held nothing to
// do (SweepStats.ReadyIdle), which RunSweeper reads less often: rows of a
// group short of its partitions' ends; and not when it holds rows to trim
// or spread.
func TestSweepReportsAnIdleReadyWindow(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("pace")
	configure(t, st, "pace", domain.ConfigPatch{})
	newGroup(t, st, "pace", "lag", domain.Start{})
	for i := range 30 {
		pushN(t, st, "pace", fmt.Sprintf("p%02d", i), 0, 1)
	}
	s, err := st.Sweep(ctx)
	require.NoError(t, err)
	require.False(t, s.ReadyIdle, "pushes' rows seen for the first time")
	sweepAll(t, st) // spread to lag's rows
	require.Equal(t, 30, count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = 'lag'`))
	s, err = st.Sweep(ctx)
	require.NoError(t, err)
	require.True(t, s.ReadyIdle, "only rows of a group short of the ends")

	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "lag", Max: 100, Partitions: 30, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 30)
	s, err = st.Sweep(ctx)
	require.NoError(t, err)
	require.False(t, s.ReadyIdle, "rows of a caught-up group to trim")
	sweepAll(t, st)
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready`))
}

// groupWhilePushing makes a group of queue that starts at the end, and
// returns a func that deletes it: the pushes in between put the partitions
// they make in the ready set (a queue with no group gets no ready row for
// them, insertFreshSQL), and once the group is gone no group is behind
// anywhere, so the sweeper trims every row.
func groupWhilePushing(t *testing.T, st *store.Store, queue string) func() {
	t.Helper()
	configure(t, st, queue, domain.ConfigPatch{}) // makes it
	newGroup(t, st, queue, "while-pushing", domain.Start{Kind: domain.StartNew})
	return func() {
		t.Helper()
		require.NoError(t, st.DeleteGroup(ctxT(t), domain.Global(queue), "while-pushing"))
	}
}
