package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/store"
)

func configure(t *testing.T, st *store.Store, queue string, p domain.ConfigPatch) {
	t.Helper()
	_, err := st.Configure(ctxT(t), domain.Global(queue), p)
	require.NoError(t, err)
}

func i64(v int64) *int64 { return &v }

func pushIDs(t *testing.T, st *store.Store, queue string, ms ...domain.PushMessage) []domain.PushResult {
	t.Helper()
	out := push(t, st, domain.PushParams{Queue: domain.Global(queue), Messages: ms})[0]
	require.NoError(t, out.Err)
	require.Len(t, out.Results, len(ms))
	return out.Results
}

// liveSegments counts the segments retention has not retired: those at or
// past their partition's low offset. (A retired segment in a hot slot
// stays until the slot is truncated; see slots.go.)
func liveSegments(t *testing.T, st *store.Store) int {
	t.Helper()
	var n int
	require.NoError(t, st.Pool().QueryRow(ctxT(t), `SELECT count(*) FROM comb_segments s
		JOIN comb_partitions p ON p.id = s.partition_id WHERE s.base_offset >= p.low_offset`).Scan(&n))
	return n
}

// dp is the partition the decoder fills in for a message that names none.
const dp = protocol.DefaultPartition

func TestDedup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", domain.ConfigPatch{DedupWindowS: i64(60)})

	res := pushIDs(t, st, "q",
		domain.PushMessage{Partition: "p", ID: "a", Data: []byte("1")},
		domain.PushMessage{Partition: "p", ID: "b", Data: []byte("2")},
		domain.PushMessage{Partition: "p", ID: "a", Data: []byte("3")}, // same batch
		domain.PushMessage{Partition: "other", ID: "a", Data: []byte("4")},
		domain.PushMessage{Partition: "p", Data: []byte("5")}, // no id: never a duplicate
	)
	require.Equal(t, []domain.PushResult{
		{Partition: "p", Offset: 0, Status: domain.Stored},
		{Partition: "p", Offset: 1, Status: domain.Stored},
		{Partition: "p", Offset: 0, Status: domain.Duplicate},
		{Partition: "other", Offset: 0, Status: domain.Stored},
		{Partition: "p", Offset: 2, Status: domain.Stored},
	}, res)

	// Concurrent requests coalesced into one transaction see each other.
	outs := push(t, st,
		domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{{Partition: "p", ID: "c", Data: []byte("6")}}},
		domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{{Partition: "p", ID: "c", Data: []byte("7")}, {Partition: "p", ID: "b", Data: []byte("8")}}})
	require.NoError(t, outs[0].Err)
	require.NoError(t, outs[1].Err)
	require.Equal(t, []domain.PushResult{{Partition: "p", Offset: 3, Status: domain.Stored}}, outs[0].Results)
	require.Equal(t, []domain.PushResult{
		{Partition: "p", Offset: 3, Status: domain.Duplicate},
		{Partition: "p", Offset: 1, Status: domain.Duplicate},
	}, outs[1].Results)

	ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global("q"), Partition: "p", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "5", "6"}, datas(ms))

	// A queue without a window stores every message.
	res = pushIDs(t, st, "plain",
		domain.PushMessage{Partition: dp, ID: "a", Data: []byte("1")}, domain.PushMessage{Partition: dp, ID: "a", Data: []byte("1")})
	require.Equal(t, domain.Stored, res[1].Status)
}

func TestDedupSurvivesRestart(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	ctx := ctxT(t)
	open := func() *store.Store {
		st, err := store.Open(ctx, url, store.Options{})
		require.NoError(t, err)
		require.NoError(t, st.Migrate(ctx))
		return st
	}
	first := open()
	configure(t, first, "q", domain.ConfigPatch{DedupWindowS: i64(60)})
	res := pushIDs(t, first, "q", domain.PushMessage{Partition: dp, ID: "order-7", Data: []byte("x")})
	require.Equal(t, domain.Stored, res[0].Status)
	first.Close()

	second := open()
	defer second.Close()
	res = pushIDs(t, second, "q", domain.PushMessage{Partition: dp, ID: "order-7", Data: []byte("x")})
	require.Equal(t, domain.PushResult{Partition: "default", Offset: 0, Status: domain.Duplicate}, res[0])
}

func TestDedupWindowExpires(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", domain.ConfigPatch{DedupWindowS: i64(1)})
	require.Equal(t, domain.Stored, pushIDs(t, st, "q", domain.PushMessage{Partition: dp, ID: "a", Data: []byte("1")})[0].Status)
	require.Equal(t, domain.Duplicate, pushIDs(t, st, "q", domain.PushMessage{Partition: dp, ID: "a", Data: []byte("1")})[0].Status)
	require.Eventually(t, func() bool {
		return pushIDs(t, st, "q", domain.PushMessage{Partition: dp, ID: "a", Data: []byte("1")})[0].Status == domain.Stored
	}, 10*time.Second, 100*time.Millisecond)
	// The sweeper forgets expired ids.
	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctxT(t))
		require.NoError(t, err)
		return s.DedupSets > 0
	}, 10*time.Second, 100*time.Millisecond)
}

// TestDelay: each shape of pop (every cursor, one partition by key,
// candidates by key) holds messages back for the queue's delay_ms.
func TestDelay(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	for name, shape := range map[string]domain.PopParams{
		"any": {}, "partition": {Partition: "p"}, "candidates": {Candidates: []string{"p", "other"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			configure(t, st, name, domain.ConfigPatch{DelayMS: i64(400)})
			pushed := time.Now()
			pushN(t, st, name, "p", 0, 2)
			req := shape
			req.Queue, req.Max = domain.Global(name), 10
			ms, err := st.Pop(ctxT(t), req)
			require.NoError(t, err)
			require.Empty(t, ms, "not deliverable before the delay")
			require.Eventually(t, func() bool {
				ms, err = st.Pop(ctxT(t), req)
				require.NoError(t, err)
				return len(ms) > 0
			}, 10*time.Second, 20*time.Millisecond)
			require.GreaterOrEqual(t, time.Since(pushed), 400*time.Millisecond)
			require.Equal(t, []string{"0", "1"}, datas(ms))
		})
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{MaxMessages: i64(5), CompletedRetentionS: i64(1)})
	pushN(t, st, "q", "p", 0, 4)
	two := []domain.PushMessage{{Partition: dp}, {Partition: dp}}
	over := push(t, st, domain.PushParams{Queue: domain.Global("q"), Messages: two})[0]
	require.ErrorIs(t, over.Err, domain.ErrLimit)
	require.Nil(t, over.Results)
	pushN(t, st, "q", "p", 4, 1)

	// Consumers complete everything; retention frees the room.
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Len(t, ms, 5)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 4, Lease: ms[0].Lease})[0].OK)
	require.Eventually(t, func() bool {
		_, err := st.Sweep(ctx)
		require.NoError(t, err)
		again := push(t, st, domain.PushParams{Queue: domain.Global("q"), Messages: two})[0]
		if again.Err != nil {
			require.ErrorIs(t, again.Err, domain.ErrLimit)
			return false
		}
		require.Len(t, again.Results, 2)
		return true
	}, 10*time.Second, 100*time.Millisecond)

	configure(t, st, "bytes", domain.ConfigPatch{MaxBytes: i64(10)})
	outs := push(t, st,
		domain.PushParams{Queue: domain.Global("bytes"), Messages: []domain.PushMessage{{Partition: dp, Data: make([]byte, 10)}}},
		domain.PushParams{Queue: domain.Global("bytes"), Messages: []domain.PushMessage{{Partition: dp, Data: make([]byte, 1)}}})
	require.NoError(t, outs[0].Err)
	require.Len(t, outs[0].Results, 1)
	require.ErrorIs(t, outs[1].Err, domain.ErrLimit)
}

func TestRetentionWaitsForTheSlowestGroup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	pushN(t, st, "q", "p", 0, 3)
	pushN(t, st, "q", "p", 3, 3)
	// The fast group completes everything, the slow one only the first
	// segment.
	fast, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "fast", Max: 10})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "fast", domain.Ack{Partition: "p", Offset: 5, Lease: fast[0].Lease})[0].OK)
	slow, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "slow", Max: 4})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "slow", domain.Ack{Partition: "p", Offset: 3, Lease: slow[0].Lease})[0].OK)

	var swept store.SweepStats
	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		swept.Segments += s.Segments
		swept.Messages += s.Messages
		return swept.Segments > 0
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, int64(3), swept.Messages, "only the segment both groups completed goes")
	// Sweeping again removes nothing the slow group still needs.
	s, err := st.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, s.Segments)

	info, err := st.Info(ctx, domain.InfoParams{Queue: domain.Global("q"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, int64(3), info.Messages)
	require.Equal(t, int64(3), info.Partitions[0].LowOffset)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "slow", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"4", "5"}, datas(ms))
	// A group that never read the queue does not hold retention back
	// (it did not exist), and starts at the oldest retained message.
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "late", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4", "5"}, datas(ms))
}

func TestRetentionKeepsEverythingWithoutGroups(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	pushN(t, st, "q", "p", 0, 3)
	var segs int
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, s.Segments, "nothing was completed by anyone")
		time.Sleep(100 * time.Millisecond) // several sweeps past the retention time
	}
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_segments`).Scan(&segs))
	require.Equal(t, 1, segs)
}

func TestMaxAge(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{MaxAgeS: i64(1)})
	pushN(t, st, "q", "p", 0, 3)
	leased, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 1, LeaseMS: 200})
	require.NoError(t, err)
	require.Len(t, leased, 1)
	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		return s.Messages == 3
	}, 10*time.Second, 100*time.Millisecond)
	pushN(t, st, "q", "p", 3, 1)
	// The group's cursor was behind the deleted messages: it resumes at the
	// oldest retained one once its lease ends.
	require.Eventually(t, func() bool {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10, LeaseMS: 1000})
		require.NoError(t, err)
		return len(ms) == 1 && string(ms[0].Data) == "3"
	}, 10*time.Second, 100*time.Millisecond)
}

func TestSeek(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "a", 0, 3)
	pushN(t, st, "q", "b", 0, 2)
	n, err := st.Seek(ctx, domain.SeekParams{Queue: domain.Global("q"), Group: "g", To: domain.Start{Kind: domain.StartNew}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 10, Partitions: 2})
	require.NoError(t, err)
	require.Empty(t, ms)

	n, err = st.Seek(ctx, domain.SeekParams{Queue: domain.Global("q"), Group: "g", Partition: "a", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 10, Partitions: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, datas(ms))
	require.Equal(t, 1, ms[0].Attempt)

	// Seeking ends the lease: the old lease's ack settles nothing.
	_, err = st.Seek(ctx, domain.SeekParams{Queue: domain.Global("q"), Group: "g", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.False(t, ack(t, st, "q", "g", domain.Ack{Partition: "a", Offset: 2, Lease: ms[0].Lease})[0].OK)

	_, err = st.Seek(ctx, domain.SeekParams{Queue: domain.Global("missing"), Group: "g", To: domain.Start{Kind: domain.StartAll}})
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func TestDeleteRemovesDedupAndCursors(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{DedupWindowS: i64(60)})
	pushIDs(t, st, "q", domain.PushMessage{Partition: dp, ID: "a", Data: []byte("1")})
	_, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.NoError(t, st.Delete(ctx, domain.Global("q")))
	for _, table := range []string{"comb_dedup_sets", "comb_cursors", "comb_ready", "comb_segments", "comb_partitions", "comb_groups"} {
		var n int
		require.NoError(t, st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
		require.Zero(t, n, table)
	}
	// The recreated queue has defaults and forgot the ids.
	res := pushIDs(t, st, "q", domain.PushMessage{Partition: dp, ID: "a", Data: []byte("1")})
	require.Equal(t, domain.Stored, res[0].Status)
}

// With several stores on one database and schema, the sweeper runs on one
// at a time: while another session holds the sweeper's lock, RunSweeper
// sweeps nothing; once it lets go, the sweep happens.
func TestSweeperLeader(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{MaxAgeS: i64(1)})
	pushN(t, st, "q", "p", 0, 3)

	other, err := st.Pool().Acquire(ctx) // another broker's sweeper, as far as the lock goes
	require.NoError(t, err)
	defer other.Release()
	_, err = other.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('comb_sweeper:' || current_schema(), 0))`)
	require.NoError(t, err)

	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); st.RunSweeper(sctx, 50*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	segments := func() int { return liveSegments(t, st) }
	time.Sleep(2 * time.Second) // past max_age_s, many rounds of the sweeper
	require.Equal(t, 1, segments(), "the other holds the lock: this store does not sweep")

	_, err = other.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('comb_sweeper:' || current_schema(), 0))`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return segments() == 0 }, 10*time.Second, 50*time.Millisecond,
		"the lock is free: this store sweeps")
}

// With several stores on one database and schema, one leads: it keeps the
// sweeper's lock between rounds, so the others skip every round rather
// than each sweeping once an interval, out of phase. When the leader
// stops, another takes the lock and sweeps.
func TestSweeperOneLeaderAcrossRounds(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	url := testURL(t)
	open := func() *store.Store {
		st, err := store.Open(ctx, url, store.Options{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		require.NoError(t, st.Migrate(ctx))
		return st
	}
	a, b := open(), open()
	// holder is the backend holding the sweeper's lock, 0 for none.
	holder := func() int {
		var pid int
		err := a.Pool().QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND objsubid = 1
			  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('comb_sweeper:' || current_schema(), 0)`).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	run := func(st *store.Store) (stop func()) {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); st.RunSweeper(sctx, 20*time.Millisecond) }()
		return func() { cancel(); <-done }
	}
	stopA := run(a)
	defer stopA()
	require.Eventually(t, func() bool { return holder() != 0 }, 10*time.Second, 10*time.Millisecond, "a takes the lock")
	leader := holder()
	stopB := run(b)
	defer stopB()
	// Many rounds of both: the lock never changes hands, so b never sweeps.
	for range 50 {
		require.Equal(t, leader, holder(), "the lock stays with the leader between rounds")
		time.Sleep(10 * time.Millisecond) // rounds of 20 ms pass between looks
	}

	// The leader's queue is swept; b's rounds are too once a stops.
	configure(t, a, "q", domain.ConfigPatch{MaxAgeS: i64(1)})
	stopA()
	require.Eventually(t, func() bool { h := holder(); return h != 0 && h != leader }, 10*time.Second, 10*time.Millisecond,
		"another store leads once the leader stops")
	pushN(t, b, "q", "p", 0, 3)
	require.Eventually(t, func() bool { return liveSegments(t, b) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the new leader sweeps")
}

// TestDedupAcrossBrokers: two brokers on one database push overlapping ids
// into the same partitions at once, each from several goroutines. Every id
// is stored exactly once, every duplicate names the stored offset, and a
// read of the partitions finds each id once, where its push said.
//
// With every id's hash the same, every id a broker remembers is a suspect
// that only PostgreSQL can settle, and the outcome must be the same.
func TestDedupAcrossBrokers(t *testing.T) {
	t.Parallel()
	t.Run("hashed", func(t *testing.T) { t.Parallel(); dedupAcrossBrokers(t, false) })
	t.Run("colliding", func(t *testing.T) { t.Parallel(); dedupAcrossBrokers(t, true) })
}

func dedupAcrossBrokers(t *testing.T, collide bool) {
	url := testURL(t)
	ctx := ctxT(t)
	var brokers []*store.Store
	for range 2 {
		st, err := store.Open(ctx, url, store.Options{MaxConns: 8})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		require.NoError(t, st.Migrate(ctx))
		if collide {
			st.CollideDedupHashes()
		}
		brokers = append(brokers, st)
	}
	configure(t, brokers[0], "q", domain.ConfigPatch{DedupWindowS: i64(60)})

	type key struct{ part, id string }
	var mu sync.Mutex
	stored := map[key]int64{}
	dups := map[key][]int64{}
	var g errgroup.Group
	for w := range 8 {
		st := brokers[w%2]
		r := rand.New(rand.NewPCG(uint64(w), 7))
		g.Go(func() error {
			for range 40 {
				var ms []domain.PushMessage
				for range 1 + r.IntN(12) {
					id := fmt.Sprintf("id-%d", r.IntN(200))
					ms = append(ms, domain.PushMessage{Partition: fmt.Sprintf("p%d", r.IntN(2)), ID: id, Data: []byte(strconv.Quote(id))})
				}
				outs, err := st.Push(ctx, []domain.PushParams{{Queue: domain.Global("q"), Messages: ms}})
				if err != nil {
					return err
				}
				if outs[0].Err != nil {
					return outs[0].Err
				}
				mu.Lock()
				for j, res := range outs[0].Results {
					k := key{ms[j].Partition, ms[j].ID}
					if res.Status == domain.Stored {
						if off, ok := stored[k]; ok {
							mu.Unlock()
							return fmt.Errorf("%v stored twice: at %d and %d", k, off, res.Offset)
						}
						stored[k] = res.Offset
					} else {
						dups[k] = append(dups[k], res.Offset)
					}
				}
				mu.Unlock()
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.NotEmpty(t, dups, "the ids overlap")
	for _, st := range brokers {
		parts, ids := st.DedupCache()
		require.Equal(t, int64(2), parts, "each broker holds both partitions")
		if !collide {
			require.Positive(t, ids)
			require.LessOrEqual(t, ids, int64(len(stored)), "no id held twice")
		}
	}
	for k, offs := range dups {
		for _, off := range offs {
			require.Equal(t, stored[k], off, "%v: a duplicate names the stored offset", k)
		}
	}
	for _, part := range []string{"p0", "p1"} {
		page, err := brokers[1].Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: part, Limit: 10000})
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, m := range page.Messages {
			k := key{part, m.ID}
			require.False(t, seen[m.ID], "%v read twice", k)
			seen[m.ID] = true
			require.Equal(t, stored[k], m.Offset, "%v: stored where its push said", k)
		}
		n := 0
		for k := range stored {
			if k.part == part {
				n++
			}
		}
		require.Len(t, seen, n, "partition %s holds every stored id", part)
	}
}

// TestDedupOneSetPerTransaction: a push transaction remembers its ids in
// one row per partition, however many there are, and peek by id still
// finds each of them.
func TestDedupOneSetPerTransaction(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{DedupWindowS: i64(60)})
	var ms []domain.PushMessage
	for i := range 500 {
		ms = append(ms, domain.PushMessage{Partition: fmt.Sprintf("p%d", i%2), ID: fmt.Sprintf("m%d", i), Data: []byte("1")})
		if i%50 == 0 {
			ms = append(ms, domain.PushMessage{Partition: "p0", Data: []byte("2")}) // no id
		}
	}
	res := pushIDs(t, st, "q", ms...)
	var sets, ids int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*), sum(cardinality(ids)) FROM comb_dedup_sets`).Scan(&sets, &ids))
	require.Equal(t, 2, sets, "one set per partition")
	require.Equal(t, 500, ids)
	for j, m := range ms {
		if m.ID == "" || j%37 != 0 {
			continue
		}
		page, err := st.Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: m.Partition, ID: m.ID})
		require.NoError(t, err)
		require.Len(t, page.Messages, 1)
		require.Equal(t, res[j].Offset, page.Messages[0].Offset, "peek finds %s", m.ID)
		require.Equal(t, m.ID, page.Messages[0].ID)
	}
}

// Retention's search for what it may delete reads no partition of a
// queue without retention, whatever plan PostgreSQL picks: 300 partitions
// with old messages in a queue without it, 5 in one with it, analyzed.
func TestRetentionSkipsQueuesWithout(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	for _, q := range []struct {
		name  string
		parts int
		ret   int64
	}{{"noret", 300, 0}, {"ret", 5, 1}} {
		configure(t, st, q.name, domain.ConfigPatch{CompletedRetentionS: i64(q.ret)})
		r := domain.PushParams{Queue: domain.Global(q.name)}
		for i := range q.parts {
			r.Messages = append(r.Messages, domain.PushMessage{Partition: "p" + strconv.Itoa(i), Data: []byte(`1`), Encoding: domain.EncodingJSON})
		}
		require.NoError(t, push(t, st, r)[0].Err)
	}
	_, err := st.Pool().Exec(ctx, `UPDATE comb_partitions SET low_created_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `ANALYZE comb_queues, comb_partitions, comb_cursors, comb_groups`)
	require.NoError(t, err)
	for _, settings := range [][]string{nil, {"enable_seqscan"}, {"enable_indexscan", "enable_bitmapscan"}, {"enable_nestloop"}} {
		tx, err := st.Pool().Begin(ctx)
		require.NoError(t, err)
		for _, off := range settings {
			_, err := tx.Exec(ctx, `SELECT set_config($1, 'off', true)`, off)
			require.NoError(t, err)
		}
		var plan []byte
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.RetentionCandidatesSQL, 1000).Scan(&plan))
		require.NoError(t, tx.Rollback(ctx))
		read := rowsRead(t, plan, "comb_partitions", "")
		require.LessOrEqual(t, read, 5, "partitions read with %v off: %s", settings, plan)
	}
}
