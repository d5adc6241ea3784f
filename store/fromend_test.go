package store_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// A group that starts at the end (from "new") writes no cursor when it is
// made: its missing cursors are at their partitions' ends
// (comb_groups.from_end, migration 0017), and each push writes the
// group's cursor where it stores, at its first offset.

// TestGroupFromTheEndWritesNoCursor: on 50 partitions with retained
// messages, a group from the end writes no cursor and no ready row, finds
// nothing by any path (any partition, a named one, the safety check of
// long polls), is behind nowhere in its figures, and then gets exactly
// what is pushed after it: on an old partition from where the push
// started, on a partition the push makes from its first message.
func TestGroupFromTheEndWritesNoCursor(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("end")
	for i := range 50 {
		pushN(t, st, "end", "p"+strconv.Itoa(i), 0, 1)
	}
	newGroup(t, st, "end", "all", domain.Start{})
	for i := range 50 { // with a group there, each writes a ready row for any group
		pushN(t, st, "end", "p"+strconv.Itoa(i), 1, 1)
	}
	newGroup(t, st, "end", "n", domain.Start{Kind: domain.StartNew})
	require.Zero(t, groupCursors(t, st, "end", "n"))
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = 'n'`))
	// Before a sweep, the pushes' rows (for any group) are in the ready set.
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 100, Partitions: 50})
	require.NoError(t, err)
	require.Empty(t, ms)
	sweepAll(t, st)
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = 'n'`), "the sweeper spreads no push's row to it")
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 100, Partitions: 50})
	require.NoError(t, err)
	require.Empty(t, ms)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Partition: "p7", Max: 100})
	require.NoError(t, err)
	require.Empty(t, ms, "a named partition too")
	require.Zero(t, groupCursors(t, st, "end", "n"), "and no pop made a cursor")
	ready, err := st.AnyReady(ctx, []domain.ReadyCheck{
		{Queue: q, Group: "n"}, {Queue: q, Group: "n", Partition: "p7"},
		{Queue: q, Group: "all"}, {Queue: q, Group: "all", Partition: "p7"},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, true, true}, ready)
	info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []domain.GroupInfo{{Name: "all", Pending: 100}, {Name: "n"}}, info.Groups)
	totals, err := st.Totals(ctx, 10)
	require.NoError(t, err)
	for _, g := range totals[0].Groups {
		if g.Name == "n" {
			require.Equal(t, store.GroupTotals{Name: "n", Popped: 100, Settled: 100}, g, "at the end of every partition")
		}
	}

	require.Equal(t, []int64{2}, pushN(t, st, "end", "p3", 2, 1))
	require.Equal(t, []int64{0, 1}, pushN(t, st, "end", "fresh", 0, 2))
	require.Equal(t, 2, groupCursors(t, st, "end", "n"), "the pushes wrote its cursors where they stored")
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 100, Partitions: 50, AutoAck: true})
	require.NoError(t, err)
	got := map[string][]int64{}
	for _, m := range ms {
		got[m.Partition] = append(got[m.Partition], m.Offset)
	}
	require.Equal(t, map[string][]int64{"p3": {2}, "fresh": {0, 1}}, got)
}

// TestSeekOfAGroupFromTheEnd: a seek of every partition to the end keeps
// the group's missing cursors (it writes none); a seek of one partition
// back to the oldest message writes the others' cursors at the end
// first, so that only that partition goes back.
func TestSeekOfAGroupFromTheEnd(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("seek")
	for i := range 5 {
		pushN(t, st, "seek", "p"+strconv.Itoa(i), 0, 2)
	}
	newGroup(t, st, "seek", "n", domain.Start{Kind: domain.StartNew})
	pushN(t, st, "seek", "p0", 2, 1)
	require.Equal(t, 1, groupCursors(t, st, "seek", "n"))

	moved, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: "n", To: domain.Start{Kind: domain.StartNew}})
	require.NoError(t, err)
	require.Equal(t, 5, moved)
	require.Equal(t, 1, groupCursors(t, st, "seek", "n"), "a seek to the end writes no cursor")
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 100, Partitions: 5})
	require.NoError(t, err)
	require.Empty(t, ms, "p0's message is behind it now")

	_, err = st.Seek(ctx, domain.SeekParams{Queue: q, Group: "n", Partition: "p3", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Equal(t, 5, groupCursors(t, st, "seek", "n"))
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_groups WHERE name = 'n' AND from_end`))
	ms, err = st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 100, Partitions: 5})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(ms))
	require.Equal(t, "p3", ms[0].Partition)
}

// TestRetentionPassesAGroupFromTheEnd: a group from the end with no
// cursor on a partition holds none of its messages back from
// completed_retention_s; the partition it has a cursor on, short of its
// end, keeps what the group has not settled.
func TestRetentionPassesAGroupFromTheEnd(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("ret")
	pushN(t, st, "ret", "a", 0, 3)
	pushN(t, st, "ret", "b", 0, 3)
	newGroup(t, st, "ret", "n", domain.Start{Kind: domain.StartNew})
	pushN(t, st, "ret", "b", 3, 1)
	configure(t, st, "ret", domain.ConfigPatch{CompletedRetentionS: i64(1)})
	sweepUntil(t, st, "ret", 1, "a's three and b's first three go; b's fourth is the group's")
	ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "n", Max: 10, Partitions: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"3"}, datas(ms))
}

// TestGroupFromTheEndBesidePushes: groups from the end made while pushes
// run, each on its own partitions and in one push's stream, get a suffix
// of every partition with no gap: none of a push answered before the
// group was asked for, all of every push asked for after it was made.
// Pushes that overlap its making may fall on either side, but no
// partition loses a message in the middle. Then deleting the groups
// beside more pushes leaves no cursor behind.
func TestGroupFromTheEndBesidePushes(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("beside")
	const parts, pushers, groups = 8, 4, 6
	type span struct {
		start, end time.Time
		part       string
		offs       []int64
	}
	var (
		mu    sync.Mutex
		spans []span
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := range pushers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				part := "p" + strconv.Itoa((w+i)%parts)
				if i%7 == 6 {
					part = fmt.Sprintf("new-%d-%d", w, i) // a partition this push makes
				}
				r := domain.PushParams{Queue: q}
				for k := range 1 + i%3 {
					r.Messages = append(r.Messages, domain.PushMessage{Partition: part, Data: []byte(strconv.Itoa(k)), Encoding: domain.EncodingJSON})
				}
				start := time.Now()
				outs, err := st.Push(ctx, []domain.PushParams{r})
				end := time.Now()
				if err != nil || outs[0].Err != nil {
					t.Errorf("push: %v %v", err, outs)
					return
				}
				sp := span{start: start, end: end, part: part}
				for _, res := range outs[0].Results {
					sp.offs = append(sp.offs, res.Offset)
				}
				mu.Lock()
				spans = append(spans, sp)
				mu.Unlock()
			}
		})
	}
	made := make([]struct{ asked, answered time.Time }, groups)
	for g := range groups {
		time.Sleep(30 * time.Millisecond)
		made[g].asked = time.Now()
		newGroup(t, st, "beside", "g"+strconv.Itoa(g), domain.Start{Kind: domain.StartNew})
		made[g].answered = time.Now()
	}
	time.Sleep(30 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	next := map[string]int64{} // each partition's end
	for _, sp := range spans {
		next[sp.part] = max(next[sp.part], sp.offs[len(sp.offs)-1]+1)
	}
	for g := range groups {
		name := "g" + strconv.Itoa(g)
		got := map[string][]int64{}
		for _, m := range popAll(t, st, q, name, 1000, 1000) {
			got[m.Partition] = append(got[m.Partition], m.Offset)
		}
		for part, offs := range got {
			slices.Sort(offs)
			for i, o := range offs {
				require.Equal(t, offs[0]+int64(i), o, "%s on %s: a gap", name, part)
			}
			require.Equal(t, next[part]-1, offs[len(offs)-1], "%s on %s: a suffix", name, part)
		}
		for _, sp := range spans {
			seen := len(got[sp.part]) > 0 && got[sp.part][0] <= sp.offs[0]
			if sp.end.Before(made[g].asked) {
				require.False(t, seen, "%s got a push answered before it was asked for", name)
			}
			if sp.start.After(made[g].answered) {
				require.True(t, seen, "%s missed a push asked for after it was made", name)
			}
		}
	}

	// Deleting them beside pushes leaves none of their cursors.
	stopPushes := pushing(t, st, q, pushers, parts)
	for g := range groups {
		require.NoError(t, st.DeleteGroup(ctx, q, "g"+strconv.Itoa(g)))
	}
	stopPushes()
	require.Zero(t, count(t, st, orphanCursorsSQL))
}

// pushing starts pushers that each push one message at a time to
// partitions "p0" … "p<parts-1>" of q in turn, until the function it
// returns is called, which waits for them.
func pushing(t *testing.T, st *store.Store, q domain.QueueRef, pushers, parts int) (stop func()) {
	t.Helper()
	var (
		done atomic.Bool
		wg   sync.WaitGroup
	)
	for w := range pushers {
		wg.Go(func() {
			for i := 0; !done.Load(); i++ {
				if _, err := st.Push(context.Background(), []domain.PushParams{{Queue: q, Messages: []domain.PushMessage{
					{Partition: "p" + strconv.Itoa((w+i)%parts), Data: []byte(`1`), Encoding: domain.EncodingJSON}}}}); err != nil {
					t.Errorf("push: %v", err)
					return
				}
			}
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// TestSeekToStartBesidePushes: groups from the end, each sought back to
// the oldest message, or to a time after the first message, while four
// pushers write, then get every message of every partition from offset 0
// (but that first one, for a seek to the time). A push that read the
// group as one from the end writes its cursor where the push starts; the
// seek takes the group's row FOR UPDATE, so that such a cursor is written
// before it (and moved back by it) or not at all.
func TestSeekToStartBesidePushes(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("backbeside")
	const parts, pushers, groups = 6, 4, 12
	pushN(t, st, "backbeside", "p0", 0, 1)
	var after time.Time
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT now()`).Scan(&after))
	stopPushes := pushing(t, st, q, pushers, parts)
	for g := range groups {
		name, to := "b"+strconv.Itoa(g), domain.Start{Kind: domain.StartAll}
		if g%2 == 1 {
			to = domain.Start{Kind: domain.StartTime, Time: after}
		}
		newGroup(t, st, "backbeside", name, domain.Start{Kind: domain.StartNew})
		time.Sleep(time.Duration(5+g) * time.Millisecond)
		_, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: name, To: to})
		require.NoError(t, err)
	}
	stopPushes()

	info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: parts})
	require.NoError(t, err)
	next := map[string]int64{}
	for _, p := range info.Partitions {
		next[p.Name] = p.NextOffset
	}
	require.Len(t, next, parts)
	for g := range groups {
		name := "b" + strconv.Itoa(g)
		first := map[string]int64{}
		if g%2 == 1 {
			first["p0"] = 1
		}
		got := map[string]int64{}
		for _, m := range popAll(t, st, q, name, 1000, 1000) {
			require.Equal(t, first[m.Partition]+got[m.Partition], m.Offset, "%s on %s: in order, no gap", name, m.Partition)
			got[m.Partition]++
		}
		for part, n := range got {
			got[part] = first[part] + n
		}
		require.Equal(t, next, got, "%s: every message", name)
	}
}

// TestSeekToEndBesidePops: groups popping a backlog from the oldest
// message, each sought on every partition, to the end or to a time after
// the backlog, while three pops make its cursors. No pop asked for after
// the seek was answered gets a message of that backlog, and each group
// gets what is pushed after. A pop that read the group before the seek
// and makes a missing cursor (at the oldest message) after it would start
// that partition over; the seek's lock on the group's row FOR UPDATE, and
// the pop's reading of from_end (to the end) or from_time (to a time)
// under its own, leave it none to make.
func TestSeekToEndBesidePops(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	q := domain.Global("endbeside")
	const parts, poppers, groups = 150, 3, 8
	r := domain.PushParams{Queue: q}
	for i := range parts {
		for k := range 3 {
			r.Messages = append(r.Messages, domain.PushMessage{Partition: "p" + strconv.Itoa(i), Data: []byte(strconv.Itoa(k)), Encoding: domain.EncodingJSON})
		}
	}
	require.NoError(t, push(t, st, r)[0].Err)
	var after time.Time
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT now()`).Scan(&after))
	var names []string
	for g := range 2 * groups {
		name, to := "e"+strconv.Itoa(g), domain.Start{Kind: domain.StartNew}
		if g >= groups {
			name, to = "t"+strconv.Itoa(g), domain.Start{Kind: domain.StartTime, Time: after}
		}
		names = append(names, name)
		var (
			answered atomic.Int64 // the seek's answer, UnixNano; 0 before
			stop     atomic.Bool
			late     atomic.Int64 // messages of pops asked for after it
			wg       sync.WaitGroup
		)
		for range poppers {
			wg.Go(func() {
				for !stop.Load() {
					asked := time.Now().UnixNano()
					ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: name, Max: 5, Partitions: 4, AutoAck: true})
					if err != nil {
						t.Errorf("pop: %v", err)
						return
					}
					if a := answered.Load(); a != 0 && asked > a {
						late.Add(int64(len(ms)))
					}
				}
			})
		}
		time.Sleep(time.Duration(3+2*(g%groups)) * time.Millisecond)
		moved, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: name, To: to})
		require.NoError(t, err)
		require.Equal(t, parts, moved)
		answered.Store(time.Now().UnixNano())
		time.Sleep(30 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		require.Zero(t, late.Load(), "%s: pops after the seek got the backlog", name)
		require.Empty(t, drain(t, st, q, name))
	}
	for _, part := range []string{"p0", "p77", "p149", "new"} {
		pushN(t, st, "endbeside", part, 0, 1)
	}
	want := []string{"new/0", "p0/3", "p149/3", "p77/3"} // drain's order
	for _, name := range names {
		require.Equal(t, want, drain(t, st, q, name), "%s: what is pushed after the seek", name)
	}
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_groups WHERE name LIKE 'e%' AND (NOT from_end OR unmarked_after IS NOT NULL)`))
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_groups WHERE name LIKE 't%' AND (from_end OR unmarked_after IS NOT NULL)`))
}
