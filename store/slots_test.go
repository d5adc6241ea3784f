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

// slotsOf returns the slot of every live segment of queue (not retired by
// retention), by partition and offset.
func slotsOf(t *testing.T, st *store.Store, queue string) []int {
	t.Helper()
	rows, err := st.Pool().Query(ctxT(t), `
		SELECT s.slot FROM comb_segments s JOIN comb_partitions p ON p.id = s.partition_id
		JOIN comb_queues q ON q.id = p.queue_id WHERE q.name = $1 AND s.base_offset >= p.low_offset
		ORDER BY p.name, s.base_offset`, queue)
	require.NoError(t, err)
	var out []int
	for rows.Next() {
		var k int16
		require.NoError(t, rows.Scan(&k))
		out = append(out, int(k))
	}
	require.NoError(t, rows.Err())
	return out
}

func relSize(t *testing.T, st *store.Store, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, st.Pool().QueryRow(ctxT(t), `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&n))
	return n
}

func relPages(t *testing.T, st *store.Store, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, st.Pool().QueryRow(ctxT(t), `SELECT pg_relation_size($1::regclass)`, table).Scan(&n))
	return n
}

// TestSlotChildren pins the migration to the ring's size: one child per
// hot slot and a cold one, no default partition.
func TestSlotChildren(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	var names []string
	rows, err := st.Pool().Query(ctxT(t), `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'comb_segments'::regclass ORDER BY c.relname`)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	var want []string
	want = append(want, store.SlotTable(store.ColdSlot))
	for k := range store.RingSlots {
		want = append(want, store.SlotTable(k))
	}
	require.ElementsMatch(t, want, names)
}

// TestSegmentsGoToTheirSlot: a queue whose retention ends within the
// ring's horizon writes into the current hot slot; a queue that keeps its
// messages, or keeps them longer, into the cold one.
func TestSegmentsGoToTheirSlot(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	h := int64(store.HotHorizon / time.Second)
	configure(t, st, "short", domain.ConfigPatch{CompletedRetentionS: i64(60)})
	configure(t, st, "aged", domain.ConfigPatch{MaxAgeS: i64(h)})
	configure(t, st, "long", domain.ConfigPatch{CompletedRetentionS: i64(h + 1)})
	var cur int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT `+store.HotSlotSQL+`::int`).Scan(&cur))
	for _, q := range []string{"short", "aged", "long", "keep"} {
		pushN(t, st, q, "p", 0, 3)
	}
	// The slot is the push's: the current one, or the next if the span
	// ended between the query above and the push.
	for _, q := range []string{"short", "aged"} {
		got := slotsOf(t, st, q)
		require.Len(t, got, 1)
		require.Contains(t, []int{cur, (cur + 1) % store.RingSlots}, got[0], q)
	}
	require.Equal(t, []int{store.ColdSlot}, slotsOf(t, st, "long"))
	require.Equal(t, []int{store.ColdSlot}, slotsOf(t, st, "keep"))
}

// TestSlotTruncatedOnceEmpty: the sweeper retires a hot slot's segments
// as retention allows, deleting none of them; the slot, with nothing live
// for slotSettle, is truncated and its space, TOAST included, is back at
// once. Until then, and while a segment is live in it, nothing is
// truncated.
func TestSlotTruncatedOnceEmpty(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	big := make([]byte, 20000) // past TOAST's threshold
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	for i := range 20 {
		out := push(t, st, domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{
			{Partition: "p", Data: []byte(strconv.Quote(string(big) + strconv.Itoa(i))), Encoding: domain.EncodingJSON}}})[0]
		require.NoError(t, out.Err)
	}
	slots := slotsOf(t, st, "q")
	require.Len(t, slots, 20)
	k := slots[0]
	other := (k + 5) % store.RingSlots // the "current" slot below: neither k nor the one before it
	table := store.SlotTable(k)

	// Live segments: the slot stays.
	t0 := time.Now()
	for _, at := range []time.Duration{0, store.SlotSettle + time.Second} {
		s, err := st.MaintainSlotsAt(ctx, other, 0.1, t0.Add(at))
		require.NoError(t, err)
		require.Zero(t, s.Truncated)
	}

	// Consume everything; retention deletes it.
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 100})
	require.NoError(t, err)
	require.Len(t, ms, 20)
	require.True(t, ack(t, st, "q", "g", domain.Ack{Partition: "p", Offset: 19, Lease: ms[0].Lease})[0].OK)
	require.Eventually(t, func() bool {
		_, err := st.Sweep(ctx)
		require.NoError(t, err)
		return liveSegments(t, st) == 0
	}, 15*time.Second, 100*time.Millisecond)
	full := relSize(t, st, table)
	var rows int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows))
	require.Equal(t, 20, rows, "retired, not deleted: the slot's truncate frees them")

	// Seen empty once: not yet truncated. Seen empty slotSettle later: truncated.
	t1 := time.Now()
	s, err := st.MaintainSlotsAt(ctx, other, 0.1, t1)
	require.NoError(t, err)
	require.Zero(t, s.Truncated)
	s, err = st.MaintainSlotsAt(ctx, other, 0.1, t1.Add(store.SlotSettle/2))
	require.NoError(t, err)
	require.Zero(t, s.Truncated, "not empty for slotSettle yet")
	s, err = st.MaintainSlotsAt(ctx, other, 0.1, t1.Add(store.SlotSettle))
	require.NoError(t, err)
	require.Equal(t, int64(1), s.Truncated)
	require.Zero(t, relPages(t, st, table))
	require.Less(t, relSize(t, st, table), full/4, "TOAST space is back too")

	// The queue goes on as before.
	out := push(t, st, domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{
		{Partition: "p", Data: []byte(`"after"`), Encoding: domain.EncodingJSON}}})[0]
	require.NoError(t, out.Err)
	require.Equal(t, int64(20), out.Results[0].Offset)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 100})
	require.NoError(t, err)
	require.Equal(t, []string{`"after"`}, datas(ms))
}

// TestSlotMovedBeforeReuse: a hot slot still holding live segments when
// the ring is about to return to it (it is the next slot, in the second
// half of the current span) has them moved to the cold slot, then is
// truncated; every message reads back the same, at the same offsets, by
// pop and peek, and a slow group still holds back what it has not done.
func TestSlotMovedBeforeReuse(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	offs := pushN(t, st, "q", "a", 0, 5)
	offs = append(offs, pushN(t, st, "q", "a", 5, 5)...)
	pushN(t, st, "q", "b", 0, 3)
	slots := slotsOf(t, st, "q")
	require.Len(t, slots, 3)
	k := slots[0]
	require.Equal(t, []int{k, k, k}, slots, "one push span; a flaky split would show here")
	before := (k + store.RingSlots - 1) % store.RingSlots

	// The fast group completes a's first segment; nobody completes the rest.
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Partition: "a", Max: 5})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "g", domain.Ack{Partition: "a", Offset: 4, Lease: ms[0].Lease})[0].OK)
	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		return s.Segments > 0
	}, 15*time.Second, 100*time.Millisecond)

	// First half of the span before k's turn: nothing moves.
	t0 := time.Now()
	s, err := st.MaintainSlotsAt(ctx, before, 0.4, t0)
	require.NoError(t, err)
	require.Zero(t, s.Moved)
	// Second half: the two live segments move.
	s, err = st.MaintainSlotsAt(ctx, before, 0.6, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, int64(2), s.Moved)
	require.Equal(t, []int{store.ColdSlot, store.ColdSlot}, slotsOf(t, st, "q"))
	s, err = st.MaintainSlotsAt(ctx, before, 0.7, t0.Add(2*time.Second))
	require.NoError(t, err)
	s2, err := st.MaintainSlotsAt(ctx, before, 0.7, t0.Add(2*time.Second+store.SlotSettle))
	require.NoError(t, err)
	require.Equal(t, int64(1), s.Truncated+s2.Truncated)
	require.Zero(t, relPages(t, st, store.SlotTable(k)))

	// Same messages, same offsets.
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Partition: "a", Max: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"5", "6", "7", "8", "9"}, datas(ms))
	for i, m := range ms {
		require.Equal(t, offs[5+i], m.Offset)
	}
	page, err := st.Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: "b", From: 0, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, datas(page.Messages))
	info, err := st.Info(ctx, domain.InfoParams{Queue: domain.Global("q"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, int64(8), info.Messages)
}

// TestSlotsUnderLoad runs slot maintenance as fast as it goes, the ring
// turning at every round (so that the slot pushes go to is moved out of
// while they go there), while producers push and a consumer pops and
// acks; once all is acked, the emptied slot is truncated. Every message pushed is delivered, once
// acked is never seen again, in offset order per partition, with its own
// data.
func TestSlotsUnderLoad(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	configure(t, st, "q", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	const producers, perProducer = 4, 150
	stop := make(chan struct{})
	maint := make(chan error, 1)
	var moved, truncated atomic.Int64
	go func() {
		now := time.Now()
		for round := 0; ; round++ {
			select {
			case <-stop:
				maint <- nil
				return
			default:
			}
			now = now.Add(store.SlotSettle)
			s, err := st.MaintainSlotsAt(ctx, round%store.RingSlots, 0.9, now)
			if err != nil {
				maint <- err
				return
			}
			moved.Add(s.Moved)
			truncated.Add(s.Truncated)
			if _, err := st.Sweep(ctx); err != nil {
				maint <- err
				return
			}
		}
	}()
	pushed := make(chan error, producers)
	for p := range producers {
		go func() {
			for i := range perProducer {
				out := push(t, st, domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{
					{Partition: "p" + strconv.Itoa(p), Data: []byte(strconv.Itoa(i)), Encoding: domain.EncodingJSON}}})[0]
				if out.Err != nil {
					pushed <- out.Err
					return
				}
			}
			pushed <- nil
		}()
	}
	next := map[string]int{}
	got := 0
	deadline := time.Now().Add(40 * time.Second)
	for got < producers*perProducer && time.Now().Before(deadline) {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 50, Partitions: producers})
		require.NoError(t, err)
		var acks []domain.Ack
		for _, m := range ms {
			require.Equal(t, strconv.Itoa(next[m.Partition]), string(m.Data), "partition %s offset %d", m.Partition, m.Offset)
			require.Equal(t, int64(next[m.Partition]), m.Offset)
			next[m.Partition]++
			got++
			acks = append(acks, domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
		}
		if len(acks) > 0 {
			for _, r := range ack(t, st, "q", "g", acks...) {
				require.True(t, r.OK)
			}
		}
	}
	for range producers {
		require.NoError(t, <-pushed)
	}
	require.Equal(t, producers*perProducer, got)
	// Everything is acked: the sweeps empty the slot, and a round truncates it.
	require.Eventually(t, func() bool { return truncated.Load() > 0 }, 20*time.Second, 10*time.Millisecond)
	close(stop)
	require.NoError(t, <-maint)
	t.Logf("%d segments moved, %d slots truncated meanwhile", moved.Load(), truncated.Load())
	require.Positive(t, moved.Load(), "the ring moved live segments under the load")
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g", Max: 50})
	require.NoError(t, err)
	require.Empty(t, ms, "nothing acked comes back")
}

// TestColdSegmentsDeleted: segments in the cold slot (pushed while the
// queue kept everything) are deleted by the sweep once retention allows,
// for autovacuum to reclaim; retiring them moves low_offset as for hot
// ones.
func TestColdSegmentsDeleted(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	require.Equal(t, []int{store.ColdSlot}, slotsOf(t, st, "q"))
	configure(t, st, "q", domain.ConfigPatch{MaxAgeS: i64(1)})
	pushN(t, st, "q", "p", 3, 2) // hot now
	require.Eventually(t, func() bool {
		_, err := st.Sweep(ctx)
		require.NoError(t, err)
		return liveSegments(t, st) == 0
	}, 15*time.Second, 100*time.Millisecond)
	var cold, hot int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE slot = -1), count(*) FILTER (WHERE slot >= 0) FROM comb_segments`).Scan(&cold, &hot))
	require.Zero(t, cold, "deleted")
	require.Equal(t, 1, hot, "retired, left for the slot's truncate")
	info, err := st.Info(ctx, domain.InfoParams{Queue: domain.Global("q"), Limit: 1000})
	require.NoError(t, err)
	require.Zero(t, info.Messages)
	require.Equal(t, int64(5), info.Partitions[0].LowOffset)
	require.Zero(t, info.Bytes)
}
