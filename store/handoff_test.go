package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// pushOffer pushes r with offers and returns its results and hand-offs.
func pushOffer(t *testing.T, st *store.Store, r domain.PushParams, offers ...domain.Offer) ([]domain.PushResult, []domain.Handed) {
	t.Helper()
	outs, handed, err := st.PushOffer(ctxT(t), []domain.PushParams{r}, offers)
	require.NoError(t, err)
	require.Len(t, outs, 1)
	require.NoError(t, outs[0].Err)
	require.Len(t, handed, len(offers))
	return outs[0].Results, handed
}

// msgs is a push of n JSON numbers from "from" on to one partition.
func msgs(queue, partition string, from, n int) domain.PushParams {
	r := domain.PushParams{Queue: domain.Global(queue)}
	for i := from; i < from+n; i++ {
		r.Messages = append(r.Messages, domain.PushMessage{Partition: partition, Data: []byte(strconv.Itoa(i)), Encoding: domain.EncodingJSON})
	}
	return r
}

// offer is an offer of partition to a pop of queue's group.
func offer(queue, group, partition string, max int) domain.Offer {
	return domain.Offer{Pop: domain.PopParams{Queue: domain.Global(queue), Group: group, Max: max}, Partition: partition}
}

// caughtUp creates group's cursor on queue's partition and leaves it
// caught up: one message pushed, popped and acked.
func caughtUp(t *testing.T, st *store.Store, queue, group, partition string) {
	t.Helper()
	pushN(t, st, queue, partition, 0, 1)
	ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global(queue), Group: group, Partition: partition})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	res := ack(t, st, queue, group, domain.Ack{Partition: partition, Offset: ms[0].Offset, Lease: ms[0].Lease})
	require.True(t, res[0].OK, res[0].Error)
}

// TestPushHandsOffToACaughtUpGroup: a push leases what it stores to an
// offered pop whose group has nothing else to deliver there, and the
// message is then what a pop would have returned: leased, acked by its
// lease, not delivered twice.
func TestPushHandsOffToACaughtUpGroup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	caughtUp(t, st, "q", "", "p")

	r := msgs("q", "p", 1, 1)
	r.Messages[0].ID = "m-1"
	r.Messages[0].Headers = domain.Headers(`{"K":["v"]}`)
	res, handed := pushOffer(t, st, r, offer("q", "", "p", 10))
	require.Len(t, handed[0].Messages, 1)
	require.True(t, handed[0].AllGroups)
	m := handed[0].Messages[0]
	require.Equal(t, "p", m.Partition)
	require.Equal(t, res[0].Offset, m.Offset)
	require.Equal(t, "m-1", m.ID)
	require.NotEmpty(t, m.Lease)
	require.Equal(t, 1, m.Attempt)
	require.Equal(t, []byte("1"), m.Data)
	require.Equal(t, domain.EncodingJSON, m.Encoding)
	require.Equal(t, domain.Headers(`{"K":["v"]}`), m.Headers)
	require.WithinDuration(t, time.Now(), m.CreatedAt, time.Minute)

	// The segment says the same; the lease hides it from other pops.
	var created time.Time
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT created_at FROM comb_segments WHERE base_offset = $1`, m.Offset).Scan(&created))
	require.True(t, created.Equal(m.CreatedAt), "%v against %v", created, m.CreatedAt)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Empty(t, ms)

	acked := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: m.Offset, Lease: m.Lease})
	require.True(t, acked[0].OK, acked[0].Error)
	// Caught up again: the next push hands off too.
	_, handed = pushOffer(t, st, msgs("q", "p", 2, 1), offer("q", "", "p", 10))
	require.Len(t, handed[0].Messages, 1)
	require.Equal(t, m.Offset+1, handed[0].Messages[0].Offset)
}

// TestPushHandsOffOnlyWhatAPopWouldLeaseFirst: no hand-off to a group
// with earlier messages to deliver or a lease on the partition, so its
// order and its one lease per partition hold; a pop's max bounds it.
func TestPushHandsOffOnlyWhatAPopWouldLeaseFirst(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	caughtUp(t, st, "q", "", "p")

	// Behind: message 1 waits, so message 2 is not handed off.
	pushN(t, st, "q", "p", 1, 1)
	_, handed := pushOffer(t, st, msgs("q", "p", 2, 1), offer("q", "", "p", 10))
	require.Empty(t, handed[0].Messages)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Partition: "p", Max: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"1"}, datas(ms))

	// Leased: message 1's lease holds the partition.
	_, handed = pushOffer(t, st, msgs("q", "p", 3, 1), offer("q", "", "p", 10))
	require.Empty(t, handed[0].Messages)
	acked := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: ms[0].Offset, Lease: ms[0].Lease})
	require.True(t, acked[0].OK, acked[0].Error)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Partition: "p"})
	require.NoError(t, err)
	require.Equal(t, []string{"2", "3"}, datas(ms))
	acked = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: ms[1].Offset, Lease: ms[1].Lease})
	require.True(t, acked[0].OK, acked[0].Error)

	// Max 2 of 3: the third stays for a pop, and some other pop must be
	// woken for it (AllGroups false).
	_, handed = pushOffer(t, st, msgs("q", "p", 4, 3), offer("q", "", "p", 2))
	require.Equal(t, []string{"4", "5"}, datas(handed[0].Messages))
	require.False(t, handed[0].AllGroups)
	acked = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: handed[0].Messages[1].Offset, Lease: handed[0].Messages[1].Lease})
	require.True(t, acked[0].OK, acked[0].Error)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Equal(t, []string{"6"}, datas(ms))

	// A partition the push did not store in, or an unknown group, takes
	// nothing.
	ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: ms[0].Offset, Lease: ms[0].Lease})
	_, handed = pushOffer(t, st, msgs("q", "p", 7, 1), offer("q", "", "other", 10), offer("q", "nobody", "p", 10))
	require.Empty(t, handed[0].Messages)
	require.Empty(t, handed[1].Messages)
}

// TestPushHandsOffPerGroup: each group's offer is its own; the partition's
// messages are settled for every group only when each took them all.
func TestPushHandsOffPerGroup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	caughtUp(t, st, "q", "a", "p")
	// Group b's cursor starts where a's is: at offset 1.
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "b", Partition: "p", From: domain.Start{Kind: domain.StartNew}})
	require.NoError(t, err)
	require.Empty(t, ms)

	_, handed := pushOffer(t, st, msgs("q", "p", 1, 1), offer("q", "a", "p", 10))
	require.Len(t, handed[0].Messages, 1)
	require.False(t, handed[0].AllGroups, "group b has the message to deliver")
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "b"})
	require.NoError(t, err)
	require.Equal(t, []string{"1"}, datas(ms))
	ack(t, st, "q", "b", domain.Ack{Partition: "p", Offset: ms[0].Offset, Lease: ms[0].Lease})
	ack(t, st, "q", "a", domain.Ack{Partition: "p", Offset: handed[0].Messages[0].Offset, Lease: handed[0].Messages[0].Lease})

	_, handed = pushOffer(t, st, msgs("q", "p", 2, 1), offer("q", "a", "p", 10), offer("q", "b", "p", 10), offer("q", "b", "p", 10))
	require.Len(t, handed[0].Messages, 1)
	require.Len(t, handed[1].Messages, 1)
	require.Empty(t, handed[2].Messages, "a second offer to one group")
	require.True(t, handed[0].AllGroups)
	require.True(t, handed[1].AllGroups)
	require.NotEqual(t, handed[0].Messages[0].Lease, handed[1].Messages[0].Lease)
}

// TestPushHandsOffNothingHeldBack: delayed messages, queues with a
// delay_ms and pushes with producer ids to deduplicate hand nothing off.
func TestPushHandsOffNothingHeldBack(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	caughtUp(t, st, "q", "", "p")
	r := msgs("q", "p", 1, 1)
	r.Messages[0].DelayMS = 60_000
	_, handed := pushOffer(t, st, r, offer("q", "", "p", 10))
	require.Empty(t, handed[0].Messages)

	caughtUp(t, st, "delayed", "", "p")
	configure(t, st, "delayed", domain.ConfigPatch{DelayMS: i64(60_000)})
	_, handed = pushOffer(t, st, msgs("delayed", "p", 1, 1), offer("delayed", "", "p", 10))
	require.Empty(t, handed[0].Messages)

	caughtUp(t, st, "dedup", "", "p")
	configure(t, st, "dedup", domain.ConfigPatch{DedupWindowS: i64(60)})
	r = msgs("dedup", "p", 1, 1)
	r.Messages[0].ID = "x"
	_, handed = pushOffer(t, st, r, offer("dedup", "", "p", 10))
	require.Empty(t, handed[0].Messages)
}

// TestHandedLeaseExpires: a hand-off's lease is a pop's: when it expires
// unacked the message comes back, with its second attempt; with auto-ack
// the message is settled at once.
func TestHandedLeaseExpires(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	caughtUp(t, st, "q", "", "p")
	o := offer("q", "", "p", 10)
	o.Pop.LeaseMS = 100
	_, handed := pushOffer(t, st, msgs("q", "p", 1, 1), o)
	require.Len(t, handed[0].Messages, 1)
	require.Eventually(t, func() bool {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q")})
		require.NoError(t, err)
		if len(ms) == 0 {
			return false
		}
		require.Equal(t, handed[0].Messages[0].Offset, ms[0].Offset)
		require.Equal(t, 2, ms[0].Attempt)
		acked := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: ms[0].Offset, Lease: ms[0].Lease})
		require.True(t, acked[0].OK, acked[0].Error)
		return true
	}, 10*time.Second, 20*time.Millisecond)

	o.Pop.AutoAck = true
	_, handed = pushOffer(t, st, msgs("q", "p", 2, 2), o)
	require.Equal(t, []string{"2", "3"}, datas(handed[0].Messages))
	require.Empty(t, handed[0].Messages[0].Lease)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Empty(t, ms, "auto-ack settled them")
	_, handed = pushOffer(t, st, msgs("q", "p", 4, 1), o)
	require.Equal(t, []string{"4"}, datas(handed[0].Messages))
}

// TestPushHandsOffBesideAGroupWithoutCursor: a group with no cursor on the
// partition yet (cursors are made lazily) has the message to deliver too,
// so the hand-off to another group does not settle it for all; an offer to
// that group is not taken, and its pop makes the cursor and gets
// everything.
func TestPushHandsOffBesideAGroupWithoutCursor(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	caughtUp(t, st, "q", "a", "p")
	newGroup(t, st, "q", "c", domain.Start{})
	require.Zero(t, groupCursors(t, st, "q", "c"))

	_, handed := pushOffer(t, st, msgs("q", "p", 1, 1), offer("q", "a", "p", 10), offer("q", "c", "p", 10))
	require.Len(t, handed[0].Messages, 1)
	require.False(t, handed[0].AllGroups, "group c has the messages to deliver")
	require.Empty(t, handed[1].Messages, "c has offset 0 to deliver first")
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "c", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(ms))
}

// TestPushHandsOffNewPartitions: a push that creates a partition makes the
// cursor of each group it offers the partition to, and hands its messages
// off; the queue's other groups get no cursor there.
func TestPushHandsOffNewPartitions(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "old", 0, 1)
	newGroup(t, st, "q", "a", domain.Start{})
	newGroup(t, st, "q", "b", domain.Start{})

	_, handed := pushOffer(t, st, msgs("q", "new", 5, 2), offer("q", "a", "new", 10))
	require.Equal(t, []string{"5", "6"}, datas(handed[0].Messages))
	require.False(t, handed[0].AllGroups, "b has them to deliver")
	require.Equal(t, 1, groupCursors(t, st, "q", "a"))
	require.Zero(t, groupCursors(t, st, "q", "b"))
	ack(t, st, "q", "a", domain.Ack{Partition: "new", Offset: 1, Lease: handed[0].Messages[0].Lease})

	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "b", Max: 10, Partitions: 10})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"0", "5", "6"}, datas(ms))
}
