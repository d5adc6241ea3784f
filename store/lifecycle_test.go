package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/store"
)

func configure(t *testing.T, st *store.Store, queue string, p store.ConfigPatch) {
	t.Helper()
	_, err := st.Configure(ctxT(t), queue, p)
	require.NoError(t, err)
}

func i64(v int64) *int64 { return &v }

func pushIDs(t *testing.T, st *store.Store, queue string, ms ...store.PushMessage) []store.PushResult {
	t.Helper()
	r := &store.PushRequest{Queue: queue, Messages: ms}
	require.NoError(t, st.Push(ctxT(t), []*store.PushRequest{r}))
	require.NoError(t, r.Err)
	return r.Results
}

func TestDedup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", store.ConfigPatch{DedupWindowS: i64(60)})

	res := pushIDs(t, st, "q",
		store.PushMessage{Partition: "p", ID: "a", Data: []byte("1")},
		store.PushMessage{Partition: "p", ID: "b", Data: []byte("2")},
		store.PushMessage{Partition: "p", ID: "a", Data: []byte("3")}, // same batch
		store.PushMessage{Partition: "other", ID: "a", Data: []byte("4")},
		store.PushMessage{Partition: "p", Data: []byte("5")}, // no id: never a duplicate
	)
	require.Equal(t, []store.PushResult{
		{Partition: "p", Offset: 0, Status: store.StatusStored},
		{Partition: "p", Offset: 1, Status: store.StatusStored},
		{Partition: "p", Offset: 0, Status: store.StatusDuplicate},
		{Partition: "other", Offset: 0, Status: store.StatusStored},
		{Partition: "p", Offset: 2, Status: store.StatusStored},
	}, res)

	// Concurrent requests coalesced into one transaction see each other.
	r1 := &store.PushRequest{Queue: "q", Messages: []store.PushMessage{{Partition: "p", ID: "c", Data: []byte("6")}}}
	r2 := &store.PushRequest{Queue: "q", Messages: []store.PushMessage{{Partition: "p", ID: "c", Data: []byte("7")}, {Partition: "p", ID: "b", Data: []byte("8")}}}
	require.NoError(t, st.Push(ctxT(t), []*store.PushRequest{r1, r2}))
	require.Equal(t, store.PushResult{Partition: "p", Offset: 3, Status: store.StatusStored}, r1.Results[0])
	require.Equal(t, store.PushResult{Partition: "p", Offset: 3, Status: store.StatusDuplicate}, r2.Results[0])
	require.Equal(t, store.PushResult{Partition: "p", Offset: 1, Status: store.StatusDuplicate}, r2.Results[1])

	ms, err := st.Pop(ctxT(t), store.PopRequest{Queue: "q", Partition: "p", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "5", "6"}, datas(ms))

	// A queue without a window stores every message.
	res = pushIDs(t, st, "plain",
		store.PushMessage{ID: "a", Data: []byte("1")}, store.PushMessage{ID: "a", Data: []byte("1")})
	require.Equal(t, store.StatusStored, res[1].Status)
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
	configure(t, first, "q", store.ConfigPatch{DedupWindowS: i64(60)})
	res := pushIDs(t, first, "q", store.PushMessage{ID: "order-7", Data: []byte("x")})
	require.Equal(t, store.StatusStored, res[0].Status)
	first.Close()

	second := open()
	defer second.Close()
	res = pushIDs(t, second, "q", store.PushMessage{ID: "order-7", Data: []byte("x")})
	require.Equal(t, store.PushResult{Partition: "default", Offset: 0, Status: store.StatusDuplicate}, res[0])
}

func TestDedupWindowExpires(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", store.ConfigPatch{DedupWindowS: i64(1)})
	require.Equal(t, store.StatusStored, pushIDs(t, st, "q", store.PushMessage{ID: "a", Data: []byte("1")})[0].Status)
	require.Equal(t, store.StatusDuplicate, pushIDs(t, st, "q", store.PushMessage{ID: "a", Data: []byte("1")})[0].Status)
	require.Eventually(t, func() bool {
		return pushIDs(t, st, "q", store.PushMessage{ID: "a", Data: []byte("1")})[0].Status == store.StatusStored
	}, 10*time.Second, 100*time.Millisecond)
	// The sweeper forgets expired ids.
	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctxT(t))
		require.NoError(t, err)
		return s.DedupIDs > 0
	}, 10*time.Second, 100*time.Millisecond)
}

func TestDelay(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", store.ConfigPatch{DelayMS: i64(400)})
	pushed := time.Now()
	pushN(t, st, "q", "p", 0, 2)
	ms, err := st.Pop(ctxT(t), store.PopRequest{Queue: "q", Max: 10})
	require.NoError(t, err)
	require.Empty(t, ms, "not deliverable before the delay")
	require.Eventually(t, func() bool {
		ms, err = st.Pop(ctxT(t), store.PopRequest{Queue: "q", Max: 10})
		require.NoError(t, err)
		return len(ms) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(pushed), 400*time.Millisecond)
	require.Equal(t, []string{"0", "1"}, datas(ms))
}

func TestLimits(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", store.ConfigPatch{MaxMessages: i64(5), CompletedRetentionS: i64(1)})
	pushN(t, st, "q", "p", 0, 4)
	over := &store.PushRequest{Queue: "q", Messages: make([]store.PushMessage, 2)}
	require.NoError(t, st.Push(ctx, []*store.PushRequest{over}))
	require.ErrorIs(t, over.Err, store.ErrLimit)
	pushN(t, st, "q", "p", 4, 1)

	// Consumers complete everything; retention frees the room.
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 10})
	require.NoError(t, err)
	require.Len(t, ms, 5)
	require.True(t, ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 4, Lease: ms[0].Lease})[0].OK)
	require.Eventually(t, func() bool {
		_, err := st.Sweep(ctx)
		require.NoError(t, err)
		again := &store.PushRequest{Queue: "q", Messages: make([]store.PushMessage, 2)}
		require.NoError(t, st.Push(ctx, []*store.PushRequest{again}))
		return again.Err == nil
	}, 10*time.Second, 100*time.Millisecond)

	configure(t, st, "bytes", store.ConfigPatch{MaxBytes: i64(10)})
	fits := &store.PushRequest{Queue: "bytes", Messages: []store.PushMessage{{Data: make([]byte, 10)}}}
	full := &store.PushRequest{Queue: "bytes", Messages: []store.PushMessage{{Data: make([]byte, 1)}}}
	require.NoError(t, st.Push(ctx, []*store.PushRequest{fits, full}))
	require.NoError(t, fits.Err)
	require.ErrorIs(t, full.Err, store.ErrLimit)
}

func TestRetentionWaitsForTheSlowestGroup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", store.ConfigPatch{CompletedRetentionS: i64(1)})
	pushN(t, st, "q", "p", 0, 3)
	pushN(t, st, "q", "p", 3, 3)
	// The fast group completes everything, the slow one only the first
	// segment.
	fast, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: "fast", Max: 10})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "fast", store.Ack{Partition: "p", Offset: 5, Lease: fast[0].Lease})[0].OK)
	slow, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: "slow", Max: 4})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "slow", store.Ack{Partition: "p", Offset: 3, Lease: slow[0].Lease})[0].OK)

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

	info, err := st.Info(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, int64(3), info.Messages)
	require.Equal(t, int64(3), info.Partitions[0].LowOffset)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: "slow", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"4", "5"}, datas(ms))
	// A group that never read the queue does not hold retention back
	// (it did not exist), and starts at the oldest retained message.
	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Group: "late", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4", "5"}, datas(ms))
}

func TestRetentionKeepsEverythingWithoutGroups(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", store.ConfigPatch{CompletedRetentionS: i64(1)})
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
	configure(t, st, "q", store.ConfigPatch{MaxAgeS: i64(1)})
	pushN(t, st, "q", "p", 0, 3)
	leased, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 1, LeaseMS: 200})
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
		ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 10, LeaseMS: 1000})
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
	n, err := st.Seek(ctx, "q", "g", "", store.From{Kind: "end"})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: "g", Max: 10, Partitions: 2})
	require.NoError(t, err)
	require.Empty(t, ms)

	n, err = st.Seek(ctx, "q", "g", "a", store.From{Kind: "start"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Group: "g", Max: 10, Partitions: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, datas(ms))
	require.Equal(t, 1, ms[0].Attempt)

	// Seeking ends the lease: the old lease's ack settles nothing.
	_, err = st.Seek(ctx, "q", "g", "", store.From{Kind: "all"})
	require.NoError(t, err)
	require.False(t, ack(t, st, "q", "g", store.Ack{Partition: "a", Offset: 2, Lease: ms[0].Lease})[0].OK)

	_, err = st.Seek(ctx, "missing", "g", "", store.From{Kind: "all"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestDeleteRemovesDedupAndCursors(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", store.ConfigPatch{DedupWindowS: i64(60)})
	pushIDs(t, st, "q", store.PushMessage{ID: "a", Data: []byte("1")})
	_, err := st.Pop(ctx, store.PopRequest{Queue: "q"})
	require.NoError(t, err)
	require.NoError(t, st.Delete(ctx, "q"))
	for _, table := range []string{"comb_dedup", "comb_cursors", "comb_segments", "comb_partitions", "comb_groups"} {
		var n int
		require.NoError(t, st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
		require.Zero(t, n, table)
	}
	// The recreated queue has defaults and forgot the ids.
	res := pushIDs(t, st, "q", store.PushMessage{ID: "a", Data: []byte("1")})
	require.Equal(t, store.StatusStored, res[0].Status)
}
