package store_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// A new group that starts at the oldest message puts the partitions it is
// behind on in the ready set a window at a time (comb_groups.unmarked_after,
// migration 0018): one window when it is made, the rest as its pops need
// them.

// markedRows counts group's rows in the ready set.
func markedRows(t *testing.T, st *store.Store, group string) int {
	t.Helper()
	return count(t, st, `SELECT count(*) FROM comb_ready WHERE group_name = $1`, group)
}

// popAll pops group, auto-acked, up to maxN messages of up to parts
// partitions a pop, until a pop finds nothing, and returns what it got.
func popAll(t *testing.T, st *store.Store, q domain.QueueRef, group string, maxN, parts int) []domain.Message {
	t.Helper()
	var got []domain.Message
	for {
		ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: q, Group: group, Max: maxN, Partitions: parts, AutoAck: true})
		require.NoError(t, err)
		if len(ms) == 0 {
			return got
		}
		got = append(got, ms...)
	}
}

// drain pops group until a pop finds nothing and returns what it got, as
// "partition/offset", sorted.
func drain(t *testing.T, st *store.Store, q domain.QueueRef, group string) []string {
	t.Helper()
	var got []string
	for _, m := range popAll(t, st, q, group, 7, 3) {
		got = append(got, fmt.Sprintf("%s/%d", m.Partition, m.Offset))
	}
	sort.Strings(got)
	return got
}

// pushEach pushes per messages to each of parts partitions of queue,
// "p00", "p01" …, and returns them as drain does.
func pushEach(t *testing.T, st *store.Store, queue string, parts, per int) []string {
	t.Helper()
	var want []string
	for i := range parts {
		part := fmt.Sprintf("p%02d", i)
		pushN(t, st, queue, part, 0, per)
		for k := range per {
			want = append(want, fmt.Sprintf("%s/%d", part, k))
		}
	}
	sort.Strings(want)
	return want
}

// TestNewGroupMarksInWindows: on 30 partitions, 10 of them retaining
// messages and none in the first window or in the ready set, with windows
// of 6, a new group
// marks the first window when it is made, says it may pop while windows
// are left, and its pops, on this store and on another one that did not
// make it, get every message once.
func TestNewGroupMarksInWindows(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	open := func() *store.Store {
		st := openStore(t, url, store.Options{MaxConns: 4})
		st.SetMarkWindow(6)
		return st
	}
	st, other := open(), open()
	q := domain.Global("windows")
	emptied(t, st, "windows", 20) // p0 … p19, retaining nothing
	var want []string
	for i := 20; i < 40; i += 2 {
		// Made by these pushes, with no group on the queue: no row in the
		// ready set, for any group (a group's making covers them).
		part := fmt.Sprintf("p%d", i)
		pushN(t, st, "windows", part, 0, 2)
		want = append(want, part+"/0", part+"/1")
	}
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_ready`))
	sort.Strings(want)

	newGroup(t, st, "windows", "g", domain.Start{})
	// p0 p1 p10 p11 p12 p13 by name: none retains messages.
	require.Zero(t, markedRows(t, st, "g"))
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM comb_groups WHERE name = 'g' AND unmarked_after = 'p13'`))
	ready, err := st.AnyReady(ctxT(t), []domain.ReadyCheck{{Queue: q, Group: "g"}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ready)

	// A pop of three partitions, with a report of 64 more, marks until
	// it has found 67 or none is left: all of them.
	ms, err := other.Pop(ctxT(t), domain.PopParams{Queue: q, Group: "g", Max: 100, Partitions: 3, AutoAck: true})
	require.Equal(t, 10, markedRows(t, st, "g"))
	require.NoError(t, err)
	require.Len(t, ms, 6)
	require.Zero(t, count(t, st, `SELECT count(*) FROM comb_groups WHERE name = 'g' AND unmarked_after IS NOT NULL`))
	got := drain(t, st, q, "g")
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%s/%d", m.Partition, m.Offset))
	}
	sort.Strings(got)
	require.Equal(t, want, got)
	ready, err = st.AnyReady(ctxT(t), []domain.ReadyCheck{{Queue: q, Group: "g"}})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, ready)
}

// TestNewGroupMarksWhatItsPopsNeed: a pop marks windows only until it has
// found what it can take and report; the next pops go on from there, and
// every message comes once.
func TestNewGroupMarksWhatItsPopsNeed(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	st.SetMarkWindow(10)
	q := domain.Global("need")
	var want []string
	for i := range 300 {
		part := fmt.Sprintf("p%03d", i)
		pushN(t, st, "need", part, 0, 1)
		want = append(want, part+"/0")
	}
	newGroup(t, st, "need", "g", domain.Start{})
	require.Equal(t, 10, markedRows(t, st, "g"))
	ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: q, Group: "g", Max: 1, Partitions: 1, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	marked := markedRows(t, st, "g")
	require.GreaterOrEqual(t, marked, 10+65)
	require.Less(t, marked, 300, "not every window for one pop")
	got := append(drain(t, st, q, "g"), fmt.Sprintf("%s/%d", ms[0].Partition, ms[0].Offset))
	sort.Strings(got)
	require.Equal(t, want, got)
}

// TestGroupsUnmarkedDownMigration: 0018's down file puts in the ready set
// what a group's marking had not reached, so that a broker older than it,
// which reads only the set, finds every partition.
func TestGroupsUnmarkedDownMigration(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	st.SetMarkWindow(4)
	for i := range 10 {
		pushN(t, st, "down", fmt.Sprintf("p%d", i), 0, 1)
	}
	newGroup(t, st, "down", "g", domain.Start{})
	require.Equal(t, 4, markedRows(t, st, "g"))
	tx := downMigrated(t, st, "0018_groups_unmarked.down.sql")
	var n int
	require.NoError(t, tx.QueryRow(ctxT(t), `SELECT count(*) FROM comb_ready WHERE group_name = 'g'`).Scan(&n))
	require.Equal(t, 10, n)
	require.NoError(t, tx.QueryRow(ctxT(t), `SELECT count(*) FROM information_schema.columns
	    WHERE table_schema = current_schema() AND table_name = 'comb_groups' AND column_name = 'unmarked_after'`).Scan(&n))
	require.Zero(t, n)
}

// TestSeekToStartMarksInWindows: a seek of every partition of a group
// back to the oldest message writes no ready row and moves no mark by
// partition; it starts the group's marking anew (unmarked_after empty), as
// a new group's. Then the group gets every retained message once, on the
// store that sought and on another one that knew the group marked; a
// group from the end goes back to the oldest message too.
func TestSeekToStartMarksInWindows(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	st := openStore(t, url, store.Options{MaxConns: 4})
	other := openStore(t, url, store.Options{MaxConns: 4, QueueCacheTTL: 300 * time.Millisecond})
	st.SetMarkWindow(4)
	other.SetMarkWindow(4)
	ctx := ctxT(t)
	q := domain.Global("back")
	want := pushEach(t, st, "back", 12, 2)
	newGroup(t, st, "back", "n", domain.Start{Kind: domain.StartNew})
	require.Equal(t, want, drain(t, st, q, "g"))
	require.Empty(t, drain(t, other, q, "g"), "other knows g, and its marking done")
	sweepAll(t, st)
	require.Zero(t, markedRows(t, st, "g"), "caught up everywhere: trimmed")

	for _, group := range []string{"g", "n"} {
		moved, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: group, To: domain.Start{Kind: domain.StartAll}})
		require.NoError(t, err)
		require.Equal(t, 12, moved)
		require.Zero(t, markedRows(t, st, group), "the seek marks nothing itself")
		require.Equal(t, 1, count(t, st, `SELECT count(*) FROM comb_groups WHERE name = $1 AND unmarked_after = '' AND NOT from_end`, group))
		ready, err := other.AnyReady(ctx, []domain.ReadyCheck{{Queue: q, Group: group}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, ready)
	}
	require.Equal(t, want, drain(t, st, q, "g"))
	require.Equal(t, want, drain(t, st, q, "n"), "from the end, sought back to the oldest message")
	require.Zero(t, count(t, st, uncoveredSQL))

	// Sought again, and popped on the other store, which read the group's
	// row before the seek: within its cache's TTL it marks too.
	_, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: "g", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	var got []string
	require.Eventually(t, func() bool {
		got = append(got, drain(t, other, q, "g")...)
		return len(got) >= len(want)
	}, 10*time.Second, 50*time.Millisecond)
	sort.Strings(got)
	require.Equal(t, want, got)

	// A store with a TTL of an hour reads the set as it was until it is
	// told to read the group anew (Reread, a seek's wake-up).
	stale := openStore(t, url, store.Options{MaxConns: 4, QueueCacheTTL: time.Hour})
	stale.SetMarkWindow(4)
	require.Empty(t, drain(t, stale, q, "g"), "it knows g, its marking done")
	sweepAll(t, st)
	_, err = st.Seek(ctx, domain.SeekParams{Queue: q, Group: "g", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Empty(t, drain(t, stale, q, "g"), "within its TTL, the set as it was: nothing")
	stale.Reread(q, "g")
	require.Equal(t, want, drain(t, stale, q, "g"))
}

// TestMarkingStepBesideSeek: a marking step that read the group's mark
// before a seek back to the start moved it, and waited for the seek's
// lock on the group's row, leaves the mark where the seek put it and
// marks again from there: the partitions before its window, whose rows
// were trimmed, come back. Moving the mark past its window, it would
// leave them out of the ready set for good.
func TestMarkingStepBesideSeek(t *testing.T) {
	t.Parallel()
	st, conn := newStoreDB(t)
	st.SetMarkWindow(4)
	ctx := ctxT(t)
	q := domain.Global("race")
	want := pushEach(t, st, "race", 12, 2)
	newGroup(t, st, "race", "g", domain.Start{})
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM comb_groups WHERE name = 'g' AND unmarked_after = 'p03'`))

	// What a seek does, with its lock on the group's row held while a
	// pop's marking step reads the mark and waits for it.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM comb_groups WHERE name = 'g' FOR UPDATE`)
	require.NoError(t, err)
	popped := make(chan []domain.Message, 1)
	go func() {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: q, Group: "g", Max: 1, Partitions: 1, AutoAck: true})
		assert.NoError(t, err)
		popped <- ms
	}()
	require.Eventually(t, func() bool {
		return count(t, st, `SELECT count(*) FROM pg_stat_activity
		    WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%unmarked_after%'`) == 1
	}, 10*time.Second, 10*time.Millisecond)
	// The seek: the first window's rows gone (as a trim takes them once
	// the group is caught up there), the mark back to the start.
	_, err = tx.Exec(ctx, `DELETE FROM comb_ready WHERE group_name = 'g'
	    AND partition_id IN (SELECT id FROM comb_partitions WHERE name <= 'p03')`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE comb_groups SET unmarked_after = '' WHERE name = 'g'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	ms := <-popped
	require.Len(t, ms, 1)
	got := append(drain(t, st, q, "g"), fmt.Sprintf("%s/%d", ms[0].Partition, ms[0].Offset))
	sort.Strings(got)
	require.Equal(t, want, got)
	require.Zero(t, count(t, st, uncoveredSQL))
}

// pushAroundATime pushes to queue's partitions "old" (offsets 0-2), then
// "both" (0-1), and returns the database's time; then "both" again (2-3)
// and "new" (0-1): what is pushed at or after that time is both/2,
// both/3, new/0 and new/1.
func pushAroundATime(t *testing.T, st *store.Store, queue string) time.Time {
	t.Helper()
	pushN(t, st, queue, "old", 0, 3)
	pushN(t, st, queue, "both", 0, 2)
	var at time.Time
	require.NoError(t, st.Pool().QueryRow(ctxT(t), `SELECT now()`).Scan(&at))
	pushN(t, st, queue, "both", 2, 2)
	pushN(t, st, queue, "new", 0, 2)
	return at
}

// TestSeekToATime: a seek of every partition to a time puts a group,
// whether it was marking its partitions, started at the end, or is made
// by the seek, at the first message pushed at or after the time on each:
// past a partition that retains only older messages, into one that
// retains both, at the start of one that retains only newer ones. It
// writes no cursor (from_time, migration 0019): the group marks its
// partitions as its pops need them, the ready set covers what it is
// behind on throughout, and what is pushed after the seek reaches it,
// on the partitions it stood at the end of too.
func TestSeekToATime(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	st.SetMarkWindow(2)
	ctx := ctxT(t)
	q := domain.Global("at")
	emptied(t, st, "at", 2) // p0 and p1 retain nothing
	mid := pushAroundATime(t, st, "at")
	newGroup(t, st, "at", "g", domain.Start{})
	newGroup(t, st, "at", "n", domain.Start{Kind: domain.StartNew})
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM comb_groups WHERE name = 'g' AND unmarked_after IS NOT NULL`), "g marks in windows of 2")

	groups := []string{"g", "n", "made"}
	want := []string{"both/2", "both/3", "new/0", "new/1"}
	for _, group := range groups {
		moved, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: group, To: domain.Start{Kind: domain.StartTime, Time: mid}})
		require.NoError(t, err)
		require.Equal(t, 5, moved)
		require.Equal(t, 1, count(t, st, `SELECT count(*) FROM comb_groups WHERE name = $1 AND from_time = $2 AND unmarked_after = '' AND NOT from_end`, group, mid))
		require.Zero(t, count(t, st, `SELECT count(*) FROM comb_cursors WHERE group_name = $1`, group), "a seek to a time writes no cursor")
		require.Zero(t, count(t, st, uncoveredSQL))
		require.Equal(t, want, drain(t, st, q, group), group)
		require.Zero(t, count(t, st, uncoveredSQL))
	}
	pushN(t, st, "at", "old", 3, 1)
	pushN(t, st, "at", "p0", 1, 1)
	for _, group := range groups {
		require.Equal(t, []string{"old/3", "p0/1"}, drain(t, st, q, group), group)
	}
	// Again, now that the groups have cursors: the seek moves them.
	want = append(want, "old/3", "p0/1")
	sort.Strings(want)
	for _, group := range groups {
		_, err := st.Seek(ctx, domain.SeekParams{Queue: q, Group: group, To: domain.Start{Kind: domain.StartTime, Time: mid}})
		require.NoError(t, err)
		require.Equal(t, want, drain(t, st, q, group), group)
	}
	require.Zero(t, count(t, st, uncoveredSQL))
}
