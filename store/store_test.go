package store_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/store"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pushN pushes n messages "p-i" to one partition in one request and returns
// their offsets.
func pushN(t *testing.T, st *store.Store, queue, partition string, from, n int) []int64 {
	t.Helper()
	r := &store.PushRequest{Queue: queue}
	for i := from; i < from+n; i++ {
		r.Messages = append(r.Messages, store.PushMessage{Partition: partition, Data: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, st.Push(ctxT(t), []*store.PushRequest{r}))
	require.NoError(t, r.Err)
	offs := make([]int64, n)
	for i, res := range r.Results {
		require.Equal(t, store.StatusStored, res.Status)
		offs[i] = res.Offset
	}
	return offs
}

func ack(t *testing.T, st *store.Store, queue, group string, acks ...store.Ack) []store.AckResult {
	t.Helper()
	r := &store.AckRequest{Queue: queue, Group: group, Acks: acks}
	require.NoError(t, st.Ack(ctxT(t), []*store.AckRequest{r}))
	require.NoError(t, r.Err)
	return r.Results
}

func datas(ms []store.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Data)
	}
	return out
}

func TestPushPopAck(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)

	require.Equal(t, []int64{0, 1, 2}, pushN(t, st, "orders", "eu", 0, 3))
	require.Equal(t, []int64{3, 4}, pushN(t, st, "orders", "eu", 3, 2))

	ms, err := st.Pop(ctx, store.PopRequest{Queue: "orders", Max: 3})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, datas(ms))
	for i, m := range ms {
		require.Equal(t, "eu", m.Partition)
		require.Equal(t, int64(i), m.Offset)
		require.Equal(t, 1, m.Attempt)
		require.NotEmpty(t, m.Lease)
		require.WithinDuration(t, time.Now(), m.CreatedAt, time.Minute)
	}
	// The partition is leased: the group gets nothing more from it.
	more, err := st.Pop(ctx, store.PopRequest{Queue: "orders"})
	require.NoError(t, err)
	require.Empty(t, more)

	res := ack(t, st, "orders", "", store.Ack{Partition: "eu", Offset: 2, Lease: ms[0].Lease})
	require.Equal(t, []store.AckResult{{OK: true}}, res)

	ms, err = st.Pop(ctx, store.PopRequest{Queue: "orders", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4"}, datas(ms))
	require.Equal(t, int64(3), ms[0].Offset)
}

func TestPopUnknownQueue(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.Pop(ctxT(t), store.PopRequest{Queue: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	r := &store.AckRequest{Queue: "nope", Acks: []store.Ack{{Partition: "x", Lease: "l-1-a"}}}
	require.NoError(t, st.Ack(ctxT(t), []*store.AckRequest{r}))
	require.ErrorIs(t, r.Err, store.ErrNotFound)
}

func TestPushSharesOneTransactionAcrossRequests(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	var reqs []*store.PushRequest
	for i := range 5 {
		r := &store.PushRequest{Queue: "q" + strconv.Itoa(i%2)}
		for j := range 3 {
			r.Messages = append(r.Messages, store.PushMessage{Partition: "p" + strconv.Itoa(j), ID: fmt.Sprintf("%d%d", i, j), Data: []byte(fmt.Sprintf("%d%d", i, j))})
		}
		reqs = append(reqs, r)
	}
	require.NoError(t, st.Push(ctx, reqs))
	seen := map[string]int64{}
	for _, r := range reqs {
		require.NoError(t, r.Err)
		for j, res := range r.Results {
			k := r.Queue + "/" + res.Partition
			require.Equal(t, seen[k], res.Offset, "offsets are dense per partition, in request order")
			require.Equal(t, "p"+strconv.Itoa(j), res.Partition)
			seen[k]++
		}
	}
	// One segment row per partition for the whole transaction.
	var segs int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_segments`).Scan(&segs))
	require.Equal(t, 6, segs)

	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q0", Partition: "p1", Max: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"01", "21", "41"}, datas(ms))
	require.Equal(t, "21", ms[1].ID)
}

func TestPopSpreadsMaxOverPartitions(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "a", 0, 3)
	pushN(t, st, "q", "b", 0, 5)
	pushN(t, st, "q", "c", 0, 5)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 6, Partitions: 3})
	require.NoError(t, err)
	require.Len(t, ms, 6)
	byPart := map[string][]int64{}
	for _, m := range ms {
		byPart[m.Partition] = append(byPart[m.Partition], m.Offset)
	}
	for p, offs := range byPart {
		for i, o := range offs {
			require.Equal(t, int64(i), o, "partition %s starts at its cursor and is contiguous", p)
		}
	}
	// The partitions not fully leased still count as leased for this group.
	rest, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 100, Partitions: 3})
	require.NoError(t, err)
	for _, m := range rest {
		_, leased := byPart[m.Partition]
		require.False(t, leased, "partition %s already holds a lease", m.Partition)
	}
}

func TestAutoAck(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 4)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 2, AutoAck: true})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(ms))
	require.Empty(t, ms[0].Lease)
	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Max: 5, AutoAck: true})
	require.NoError(t, err)
	require.Equal(t, []string{"2", "3"}, datas(ms))
}

func TestGroupsHaveTheirOwnCursors(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	for _, g := range []string{"a", "b"} {
		ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: g, Max: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"0", "1", "2"}, datas(ms))
		require.Equal(t, []store.AckResult{{OK: true}}, ack(t, st, "q", g, store.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease}))
	}
	// A partition created after the groups is read from its start by both.
	pushN(t, st, "q", "late", 0, 2)
	for _, g := range []string{"a", "b"} {
		ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: g, Max: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"0", "1"}, datas(ms))
		require.Equal(t, "late", ms[0].Partition)
	}
}

func TestFrom(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	var mid time.Time
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT now()`).Scan(&mid))
	pushN(t, st, "q", "p", 3, 2)

	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: "new", From: store.From{Kind: "new"}, Max: 10})
	require.NoError(t, err)
	require.Empty(t, ms)
	pushN(t, st, "q", "p", 5, 1)
	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Group: "new", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"5"}, datas(ms))

	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Group: "time", From: store.From{Kind: "time", Time: mid}, Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4", "5"}, datas(ms))

	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Group: "all", From: store.From{Kind: "all"}, Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, datas(ms))
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	first, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 2, LeaseMS: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(first))

	var again []store.Message
	require.Eventually(t, func() bool {
		again, err = st.Pop(ctx, store.PopRequest{Queue: "q", Max: 3})
		require.NoError(t, err)
		return len(again) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"0", "1", "2"}, datas(again))
	require.Equal(t, []int{2, 2, 1}, []int{again[0].Attempt, again[1].Attempt, again[2].Attempt})
	require.NotEqual(t, first[0].Lease, again[0].Lease)

	// The expired lease settles nothing and says so.
	res := ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 1, Lease: first[0].Lease})
	require.False(t, res[0].OK)
	require.Contains(t, res[0].Error, "lease expired")
	// The live lease still covers everything.
	res = ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 2, Lease: again[0].Lease})
	require.True(t, res[0].OK, res[0].Error)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q"})
	require.NoError(t, err)
	require.Empty(t, ms)
}

func TestAckValidation(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 5)
	pushN(t, st, "q", "other", 0, 1)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Partition: "p", Max: 3})
	require.NoError(t, err)
	lease := ms[0].Lease
	theirs, err := st.Pop(ctx, store.PopRequest{Queue: "q", Group: "g2", Partition: "p", Max: 1})
	require.NoError(t, err)

	res := ack(t, st, "q", "",
		store.Ack{Partition: "p", Offset: 3, Lease: lease},           // past the lease
		store.Ack{Partition: "p", Offset: 0, Lease: theirs[0].Lease}, // another group's lease
		store.Ack{Partition: "p", Offset: 0, Lease: "l-1-000"},       // made up
		store.Ack{Partition: "nope", Offset: 0, Lease: lease},        // unknown partition
		store.Ack{Partition: "other", Offset: 0, Lease: lease},       // lease of another partition
		store.Ack{Partition: "p", Offset: 1, Lease: lease + "x"},     // mangled
	)
	for i, r := range res {
		require.False(t, r.OK, "ack %d", i)
		require.NotEmpty(t, r.Error)
	}
	require.Contains(t, res[0].Error, "outside its lease")
	require.Contains(t, res[3].Error, "unknown partition")

	// Nothing moved: the lease still starts at 0 and ends at 2.
	res = ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 0, Lease: lease})
	require.True(t, res[0].OK)
	res = ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 2, Lease: lease})
	require.True(t, res[0].OK)
	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Partition: "p", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4"}, datas(ms))

	bad := &store.AckRequest{Queue: "q", Acks: []store.Ack{{Partition: "p", Offset: 3, Lease: ms[0].Lease, Status: "nope"}}}
	require.NoError(t, st.Ack(ctx, []*store.AckRequest{bad}))
	require.ErrorIs(t, bad.Err, store.ErrInvalid)
	res = ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 4, Lease: ms[0].Lease})
	require.True(t, res[0].OK, "an invalid request settled nothing")
}

func TestAckStatuses(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	maxAttempts := int64(2)
	_, err := st.Configure(ctx, "q", store.ConfigPatch{MaxAttempts: &maxAttempts})
	require.NoError(t, err)
	pushN(t, st, "q", "p", 0, 6)
	pop := func(n int) []store.Message {
		ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: n})
		require.NoError(t, err)
		return ms
	}

	// retry: done up to N-1; N on comes back at once, attempt unchanged.
	ms := pop(3)
	require.True(t, ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: store.AckRetry})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"1", "2", "3"}, datas(ms))
	require.Equal(t, 1, ms[0].Attempt)

	// failed: spends an attempt; at max_attempts the message is dead-lettered.
	require.True(t, ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: store.AckFailed})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"1", "2", "3"}, datas(ms))
	require.Equal(t, 2, ms[0].Attempt)
	require.True(t, ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: store.AckFailed})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"2", "3", "4"}, datas(ms), "message 1 is dead, the cursor moved past it")

	// dead: message N goes to the dead letters at once; the lease goes on.
	res := ack(t, st, "q", "",
		store.Ack{Partition: "p", Offset: 3, Lease: ms[0].Lease, Status: store.AckDead},
		store.Ack{Partition: "p", Offset: 4, Lease: ms[0].Lease})
	require.Equal(t, []store.AckResult{{OK: true}, {OK: true}}, res)
	ms = pop(3)
	require.Equal(t, []string{"5"}, datas(ms))

	dls, next, err := st.DeadLetters(ctx, store.DLQQuery{Queue: "q"})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, dls, 2)
	require.Equal(t, "1", string(dls[0].Data))
	require.Equal(t, "failed", dls[0].Reason)
	require.Equal(t, 2, dls[0].Attempts)
	require.Equal(t, int64(1), dls[0].Offset)
	require.Equal(t, "3", string(dls[1].Data))
	require.Equal(t, "dead", dls[1].Reason)

	// Replay pushes a dead letter back as a new message; purge drops one.
	n, err := st.ReplayDeadLetters(ctx, "q", []string{dls[0].DLQID})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = st.PurgeDeadLetters(ctx, "q", []string{dls[1].DLQID})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	dls, _, err = st.DeadLetters(ctx, store.DLQQuery{Queue: "q"})
	require.NoError(t, err)
	require.Empty(t, dls)
	require.True(t, ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 5, Lease: ms[0].Lease})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"1"}, datas(ms))
	require.Equal(t, int64(6), ms[0].Offset)
}

func TestDeadLetterOff(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	off := false
	_, err := st.Configure(ctx, "q", store.ConfigPatch{DeadLetter: &off})
	require.NoError(t, err)
	pushN(t, st, "q", "p", 0, 2)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 1})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: store.AckDead})[0].OK)
	dls, _, err := st.DeadLetters(ctx, store.DLQQuery{Queue: "q"})
	require.NoError(t, err)
	require.Empty(t, dls)
	ms, err = st.Pop(ctx, store.PopRequest{Queue: "q", Max: 5})
	require.NoError(t, err)
	require.Equal(t, []string{"1"}, datas(ms))
}

func TestRenew(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 1)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", LeaseMS: 1000})
	require.NoError(t, err)
	res, err := st.Renew(ctx, "q", []string{ms[0].Lease, "l-1-nothing", "garbage"}, 60000)
	require.NoError(t, err)
	require.True(t, res[0].OK)
	require.WithinDuration(t, time.Now().Add(time.Minute), res[0].ExpiresAt, 10*time.Second)
	require.False(t, res[1].OK)
	require.False(t, res[2].OK)
}

func TestConfigureMergesAndValidates(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	lease := int64(5000)
	c, err := st.Configure(ctx, "q", store.ConfigPatch{LeaseMS: &lease})
	require.NoError(t, err)
	want := store.DefaultConfig()
	want.LeaseMS = 5000
	require.Equal(t, want, c)

	attempts := int64(7)
	c, err = st.Configure(ctx, "q", store.ConfigPatch{MaxAttempts: &attempts})
	require.NoError(t, err)
	want.MaxAttempts = 7
	require.Equal(t, want, c, "a partial configure keeps the other fields")

	bad := int64(-1)
	_, err = st.Configure(ctx, "q", store.ConfigPatch{MaxMessages: &bad})
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Contains(t, err.Error(), "max_messages")

	// A queue created by a push gets the same defaults.
	pushN(t, st, "pushed", "p", 0, 1)
	info, err := st.Info(ctx, "pushed")
	require.NoError(t, err)
	require.Equal(t, store.DefaultConfig(), info.Config)
}

func TestInfoListDelete(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "b", "p1", 0, 3)
	pushN(t, st, "b", "p2", 0, 2)
	pushN(t, st, "a", "p", 0, 1)
	ms, err := st.Pop(ctx, store.PopRequest{Queue: "b", Group: "g", Partition: "p1", Max: 2})
	require.NoError(t, err)
	require.True(t, ack(t, st, "b", "g", store.Ack{Partition: "p1", Offset: 1, Lease: ms[0].Lease})[0].OK)

	info, err := st.Info(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, int64(5), info.Messages)
	require.Equal(t, int64(5), info.Bytes)
	require.Len(t, info.Partitions, 2)
	require.Equal(t, []store.GroupInfo{{Name: "g", Pending: 3, Leased: 0}}, info.Groups)

	list, err := st.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "a", list[0].Name)
	require.Equal(t, store.QueueSummary{Name: "b", Partitions: 2, Messages: 5, Bytes: 5, Groups: 1, Pending: 3}, list[1])

	require.NoError(t, st.Delete(ctx, "b"))
	require.ErrorIs(t, st.Delete(ctx, "b"), store.ErrNotFound)
	_, err = st.Info(ctx, "b")
	require.ErrorIs(t, err, store.ErrNotFound)
	var segs int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_segments`).Scan(&segs))
	require.Equal(t, 1, segs, "only queue a's segment is left")

	// A push recreates a deleted queue from scratch, also through a store
	// whose caches still know the old one.
	require.Equal(t, []int64{0}, pushN(t, st, "b", "p1", 0, 1))
}

func TestTooLargeMessage(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	small := int64(10)
	_, err := st.Configure(ctx, "q", store.ConfigPatch{MaxMessageBytes: &small})
	require.NoError(t, err)
	ok := &store.PushRequest{Queue: "q", Messages: []store.PushMessage{{Data: []byte("fits")}}}
	big := &store.PushRequest{Queue: "q", Messages: []store.PushMessage{{Data: []byte("fits")}, {Data: make([]byte, 11)}}}
	require.NoError(t, st.Push(ctx, []*store.PushRequest{ok, big}))
	require.NoError(t, ok.Err)
	require.ErrorIs(t, big.Err, store.ErrTooLarge)
	info, err := st.Info(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Messages, "the refused request stored nothing")
}

func TestPopTrimmedToMaxBytesGivesBackTheRest(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "a", 0, 5)
	pushN(t, st, "q", "b", 0, 5)
	size := func(*store.Message) int { return 10 }

	ms, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 10, Partitions: 2, MaxBytes: 30, SizeOf: size})
	require.NoError(t, err)
	require.Len(t, ms, 3, "three 10-byte messages fit in 30")
	first := ms[0].Partition
	// Acking the last message returned ends the lease: nothing beyond it
	// stayed leased.
	require.True(t, ack(t, st, "q", "", store.Ack{Partition: first, Offset: 2, Lease: ms[0].Lease})[0].OK)
	// The other partition returned nothing and was released at once; the
	// rest of both comes with attempt 1, having never been seen.
	rest, err := st.Pop(ctx, store.PopRequest{Queue: "q", Max: 100, Partitions: 2})
	require.NoError(t, err)
	require.Len(t, rest, 7)
	for _, m := range rest {
		require.Equal(t, 1, m.Attempt)
	}

	// Auto-ack: what did not fit is not lost.
	pushN(t, st, "auto", "p", 0, 4)
	got := 0
	for range 4 {
		ms, err := st.Pop(ctx, store.PopRequest{Queue: "auto", Max: 10, AutoAck: true, MaxBytes: 15, SizeOf: size})
		require.NoError(t, err)
		require.Len(t, ms, 1, "at least one message, even over the bound's half")
		require.Equal(t, int64(got), ms[0].Offset)
		got++
	}
	ms, err = st.Pop(ctx, store.PopRequest{Queue: "auto", AutoAck: true})
	require.NoError(t, err)
	require.Empty(t, ms)
}

func TestMadeUpLeaseSaysSo(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pushN(t, st, "q", "p", 0, 1)
	_, err := st.Pop(ctxT(t), store.PopRequest{Queue: "q"})
	require.NoError(t, err)
	res := ack(t, st, "q", "", store.Ack{Partition: "p", Offset: 0, Lease: "l-x"})
	require.Contains(t, res[0].Error, "lease expired or not held")
}
