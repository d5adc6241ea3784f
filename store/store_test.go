package store_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/testenv"
	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/store"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// push pushes reqs in one call and returns their outcomes, one per request.
func push(t *testing.T, st *store.Store, reqs ...domain.PushParams) []domain.PushOutcome {
	t.Helper()
	outs, err := st.Push(ctxT(t), reqs)
	require.NoError(t, err)
	require.Len(t, outs, len(reqs))
	return outs
}

// pushN pushes n messages "i" (JSON numbers) to one partition in one
// request and returns their offsets.
func pushN(t *testing.T, st *store.Store, queue, partition string, from, n int) []int64 {
	t.Helper()
	r := domain.PushParams{Queue: domain.Global(queue)}
	for i := from; i < from+n; i++ {
		r.Messages = append(r.Messages, domain.PushMessage{Partition: partition, Data: []byte(strconv.Itoa(i)), Encoding: domain.EncodingJSON})
	}
	out := push(t, st, r)[0]
	require.NoError(t, out.Err)
	require.Len(t, out.Results, n)
	offs := make([]int64, n)
	for i, res := range out.Results {
		require.Equal(t, domain.Stored, res.Status)
		require.Equal(t, partition, res.Partition)
		offs[i] = res.Offset
	}
	return offs
}

// ackOutcome sends one ack request and returns its outcome.
func ackOutcome(t *testing.T, st *store.Store, r domain.AckParams) domain.AckOutcome {
	t.Helper()
	outs, err := st.Ack(ctxT(t), []domain.AckParams{r})
	require.NoError(t, err)
	require.Len(t, outs, 1)
	return outs[0]
}

// ack settles acks and returns their results with More and Freed cleared,
// so that tests compare what settled; TestAckSaysWhenMoreIsReady pins them.
func ack(t *testing.T, st *store.Store, queue, group string, acks ...domain.Ack) []domain.AckResult {
	t.Helper()
	out := ackOutcome(t, st, domain.AckParams{Queue: domain.Global(queue), Group: group, Acks: acks})
	require.NoError(t, out.Err)
	require.Len(t, out.Results, len(acks))
	for i := range out.Results {
		out.Results[i].More, out.Results[i].Freed = false, false
	}
	return out.Results
}

// TestAckSaysWhenMoreIsReady: an ack reports More only when it may have
// made messages deliverable to the group's other consumers, which is when
// the bridge wakes their pops.
func TestAckSaysWhenMoreIsReady(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	settle := func(a domain.Ack) domain.AckResult {
		out := ackOutcome(t, st, domain.AckParams{Queue: domain.Global("q"), Acks: []domain.Ack{a}})
		require.NoError(t, out.Err)
		return out.Results[0]
	}
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 2})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, domain.AckResult{OK: true, Settled: 1}, settle(domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease}),
		"within its lease: the partition stays leased")
	require.Equal(t, domain.AckResult{OK: true, More: true, Freed: true, Settled: 1}, settle(domain.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease}),
		"ends the lease with offset 2 behind it")

	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 2})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, domain.AckResult{OK: true, More: true, Freed: true, Retried: 1}, settle(domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease, Status: domain.AckRetry}),
		"a retry makes the message deliverable again")
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, domain.AckResult{OK: true, Freed: true, Settled: 1}, settle(domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease}),
		"ends the lease with nothing behind it that the ack saw")
	require.Equal(t, domain.AckResult{Error: "lease expired or not held by this group"},
		settle(domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease}), "a refused ack says nothing more")
}

func datas(ms []domain.Message) []string {
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

	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("orders"), Max: 3})
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
	more, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("orders")})
	require.NoError(t, err)
	require.Empty(t, more)

	res := ack(t, st, "orders", "", domain.Ack{Partition: "eu", Offset: 2, Lease: ms[0].Lease})
	require.Equal(t, []domain.AckResult{{OK: true, Settled: 3}}, res)

	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("orders"), Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4"}, datas(ms))
	require.Equal(t, int64(3), ms[0].Offset)
}

func TestPopUnknownQueue(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global("nope")})
	require.ErrorIs(t, err, domain.ErrNotFound)
	out := ackOutcome(t, st, domain.AckParams{Queue: domain.Global("nope"), Acks: []domain.Ack{{Partition: "x", Lease: "l-1-a"}}})
	require.ErrorIs(t, out.Err, domain.ErrNotFound)
	require.Nil(t, out.Results)
}

func TestPushSharesOneTransactionAcrossRequests(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	var reqs []domain.PushParams
	for i := range 5 {
		r := domain.PushParams{Queue: domain.Global("q" + strconv.Itoa(i%2))}
		for j := range 3 {
			r.Messages = append(r.Messages, domain.PushMessage{Partition: "p" + strconv.Itoa(j), ID: fmt.Sprintf("%d%d", i, j), Data: []byte(fmt.Sprintf("%d%d", i, j))})
		}
		reqs = append(reqs, r)
	}
	outs := push(t, st, reqs...)
	seen := map[string]int64{}
	for i, out := range outs {
		require.NoError(t, out.Err)
		require.Len(t, out.Results, len(reqs[i].Messages))
		for j, res := range out.Results {
			require.Equal(t, domain.Stored, res.Status)
			k := reqs[i].Queue.Name + "/" + res.Partition
			require.Equal(t, seen[k], res.Offset, "offsets are dense per partition, in request order")
			require.Equal(t, "p"+strconv.Itoa(j), res.Partition)
			seen[k]++
		}
	}
	// One segment row per partition for the whole transaction.
	var segs int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_segments`).Scan(&segs))
	require.Equal(t, 6, segs)

	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q0"), Partition: "p1", Max: 100})
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
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 6, Partitions: 3})
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
	rest, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 100, Partitions: 3})
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
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 2, AutoAck: true})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(ms))
	require.Empty(t, ms[0].Lease)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 5, AutoAck: true})
	require.NoError(t, err)
	require.Equal(t, []string{"2", "3"}, datas(ms))
}

func TestGroupsHaveTheirOwnCursors(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	for _, g := range []string{"a", "b"} {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: g, Max: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"0", "1", "2"}, datas(ms))
		require.Equal(t, []domain.AckResult{{OK: true, Settled: 3}}, ack(t, st, "q", g, domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease}))
	}
	// A partition created after the groups is read from its start by both.
	pushN(t, st, "q", "late", 0, 2)
	for _, g := range []string{"a", "b"} {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: g, Max: 10})
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

	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "new", From: domain.Start{Kind: domain.StartNew}, Max: 10})
	require.NoError(t, err)
	require.Empty(t, ms)
	pushN(t, st, "q", "p", 5, 1)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "new", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"5"}, datas(ms))

	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "time", From: domain.Start{Kind: domain.StartTime, Time: mid}, Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4", "5"}, datas(ms))

	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "all", From: domain.Start{Kind: domain.StartAll}, Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, datas(ms))
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 3)
	first, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 2, LeaseMS: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, datas(first))

	var again []domain.Message
	require.Eventually(t, func() bool {
		again, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 3})
		require.NoError(t, err)
		return len(again) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"0", "1", "2"}, datas(again))
	require.Equal(t, []int{2, 2, 1}, []int{again[0].Attempt, again[1].Attempt, again[2].Attempt})
	require.NotEqual(t, first[0].Lease, again[0].Lease)

	// The expired lease settles nothing and says so.
	res := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 1, Lease: first[0].Lease})
	require.False(t, res[0].OK)
	require.Contains(t, res[0].Error, "lease expired")
	// The live lease still covers everything.
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 2, Lease: again[0].Lease})
	require.True(t, res[0].OK, res[0].Error)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Empty(t, ms)
}

func TestAckValidation(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 5)
	pushN(t, st, "q", "other", 0, 1)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Partition: "p", Max: 3})
	require.NoError(t, err)
	lease := ms[0].Lease
	theirs, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: "g2", Partition: "p", Max: 1})
	require.NoError(t, err)

	res := ack(t, st, "q", "",
		domain.Ack{Partition: "p", Offset: 3, Lease: lease},           // past the lease
		domain.Ack{Partition: "p", Offset: 0, Lease: theirs[0].Lease}, // another group's lease
		domain.Ack{Partition: "p", Offset: 0, Lease: "l-1-000"},       // made up
		domain.Ack{Partition: "nope", Offset: 0, Lease: lease},        // unknown partition
		domain.Ack{Partition: "other", Offset: 0, Lease: lease},       // lease of another partition
		domain.Ack{Partition: "p", Offset: 1, Lease: lease + "x"},     // mangled
	)
	for i, r := range res {
		require.False(t, r.OK, "ack %d", i)
		require.NotEmpty(t, r.Error)
	}
	require.Contains(t, res[0].Error, "outside its lease")
	require.Contains(t, res[3].Error, "unknown partition")

	// Nothing moved: the lease still starts at 0 and ends at 2.
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: lease})
	require.True(t, res[0].OK)
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 2, Lease: lease})
	require.True(t, res[0].OK)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Partition: "p", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3", "4"}, datas(ms))

	bad := ackOutcome(t, st, domain.AckParams{Queue: domain.Global("q"), Acks: []domain.Ack{{Partition: "p", Offset: 3, Lease: ms[0].Lease, Status: domain.AckStatus(99)}}})
	require.ErrorIs(t, bad.Err, domain.ErrInvalid)
	require.Nil(t, bad.Results)
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 4, Lease: ms[0].Lease})
	require.True(t, res[0].OK, "an invalid request settled nothing")
}

func TestAckStatuses(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	maxAttempts := int64(2)
	_, err := st.Configure(ctx, domain.Global("q"), domain.ConfigPatch{MaxAttempts: &maxAttempts})
	require.NoError(t, err)
	pushN(t, st, "q", "p", 0, 6)
	pop := func(n int) []domain.Message {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: n})
		require.NoError(t, err)
		return ms
	}

	// retry: done up to N-1; N on comes back at once, attempt unchanged.
	ms := pop(3)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: domain.AckRetry})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"1", "2", "3"}, datas(ms))
	require.Equal(t, 1, ms[0].Attempt)

	// failed: spends an attempt; at max_attempts the message is dead-lettered.
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: domain.AckFailed})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"1", "2", "3"}, datas(ms))
	require.Equal(t, 2, ms[0].Attempt)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: domain.AckFailed})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"2", "3", "4"}, datas(ms), "message 1 is dead, the cursor moved past it")

	// dead: message N goes to the dead letters at once; the lease goes on.
	res := ack(t, st, "q", "",
		domain.Ack{Partition: "p", Offset: 3, Lease: ms[0].Lease, Status: domain.AckDead},
		domain.Ack{Partition: "p", Offset: 4, Lease: ms[0].Lease})
	require.Equal(t, []domain.AckResult{{OK: true, Settled: 1, Dead: true, DeadBytes: 1}, {OK: true, Settled: 1}}, res)
	ms = pop(3)
	require.Equal(t, []string{"5"}, datas(ms))

	dls, next, err := st.DeadLetters(ctx, domain.DLQParams{Queue: domain.Global("q")})
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
	n, err := st.ReplayDeadLetters(ctx, domain.Global("q"), []string{dls[0].DLQID})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = st.PurgeDeadLetters(ctx, domain.Global("q"), []string{dls[1].DLQID})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	dls, _, err = st.DeadLetters(ctx, domain.DLQParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Empty(t, dls)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 5, Lease: ms[0].Lease})[0].OK)
	ms = pop(3)
	require.Equal(t, []string{"1"}, datas(ms))
	require.Equal(t, int64(6), ms[0].Offset)
}

func TestDeadLetterOff(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	off := false
	_, err := st.Configure(ctx, domain.Global("q"), domain.ConfigPatch{DeadLetter: &off})
	require.NoError(t, err)
	pushN(t, st, "q", "p", 0, 2)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 1})
	require.NoError(t, err)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckDead})[0].OK)
	dls, _, err := st.DeadLetters(ctx, domain.DLQParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Empty(t, dls)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 5})
	require.NoError(t, err)
	require.Equal(t, []string{"1"}, datas(ms))
}

func TestRenew(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "p", 0, 1)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), LeaseMS: 1000})
	require.NoError(t, err)
	res, err := st.Renew(ctx, domain.RenewParams{Queue: domain.Global("q"), Leases: []string{ms[0].Lease, "l-1-nothing", "garbage"}, LeaseMS: 60000})
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.True(t, res[0].OK)
	require.Equal(t, ms[0].Lease, res[0].Lease)
	require.WithinDuration(t, time.Now().Add(time.Minute), res[0].ExpiresAt, 10*time.Second)
	require.False(t, res[1].OK)
	require.False(t, res[2].OK)
}

func TestConfigureMergesAndValidates(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	lease := int64(5000)
	c, err := st.Configure(ctx, domain.Global("q"), domain.ConfigPatch{LeaseMS: &lease})
	require.NoError(t, err)
	want := domain.DefaultQueueConfig()
	want.LeaseMS = 5000
	require.Equal(t, want, c)

	attempts := int64(7)
	c, err = st.Configure(ctx, domain.Global("q"), domain.ConfigPatch{MaxAttempts: &attempts})
	require.NoError(t, err)
	want.MaxAttempts = 7
	require.Equal(t, want, c, "a partial configure keeps the other fields")

	bad := int64(-1)
	_, err = st.Configure(ctx, domain.Global("q"), domain.ConfigPatch{MaxMessages: &bad})
	require.ErrorIs(t, err, domain.ErrInvalid)
	require.Contains(t, err.Error(), "max_messages")
	short := int64(50)
	_, err = st.Configure(ctx, domain.Global("q"), domain.ConfigPatch{LeaseMS: &short})
	require.ErrorIs(t, err, domain.ErrInvalid)
	require.EqualError(t, err, "lease_ms: 50 is out of range 100..86400000")
	info, err := st.Info(ctx, domain.InfoParams{Queue: domain.Global("q"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, want, info.Config, "a refused configure changed nothing")

	// A queue created by a push gets the same defaults.
	pushN(t, st, "pushed", "p", 0, 1)
	info, err = st.Info(ctx, domain.InfoParams{Queue: domain.Global("pushed"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, domain.DefaultQueueConfig(), info.Config)
}

// Info reads a page of each list after its own position, with the whole
// queue's figures; List a page of queues after a name.
func TestInfoListPages(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	for _, p := range []string{"p1", "p2", "p3", "p4", "p5"} {
		pushN(t, st, "q", p, 0, 1)
	}
	for _, g := range []string{"g1", "g2", "g3"} {
		_, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: g, Partition: "p1", Max: 1})
		require.NoError(t, err)
	}
	names := func(info domain.Info) (ps, gs []string) {
		for _, p := range info.Partitions {
			ps = append(ps, p.Name)
		}
		for _, g := range info.Groups {
			gs = append(gs, g.Name)
		}
		return ps, gs
	}
	for _, c := range []struct {
		at                 domain.InfoParams
		partitions, groups []string
		morePs, moreGs     bool
	}{
		{domain.InfoParams{Limit: 2}, []string{"p1", "p2"}, []string{"g1", "g2"}, true, true},
		{domain.InfoParams{Limit: 2, Partitions: domain.PageAt{After: "p2"}, Groups: domain.PageAt{After: "g2"}}, []string{"p3", "p4"}, []string{"g3"}, true, false},
		{domain.InfoParams{Limit: 2, Partitions: domain.PageAt{After: "p4"}, Groups: domain.PageAt{Done: true}}, []string{"p5"}, nil, false, false},
		{domain.InfoParams{Limit: 3, Partitions: domain.PageAt{Done: true}, Groups: domain.PageAt{After: "g1"}}, nil, []string{"g2", "g3"}, false, false},
		{domain.InfoParams{Limit: 5}, []string{"p1", "p2", "p3", "p4", "p5"}, []string{"g1", "g2", "g3"}, false, false},
	} {
		c.at.Queue = domain.Global("q")
		info, err := st.Info(ctx, c.at)
		require.NoError(t, err)
		ps, gs := names(info)
		require.Equal(t, c.partitions, ps, "%+v", c.at)
		require.Equal(t, c.groups, gs, "%+v", c.at)
		require.Equal(t, c.morePs, info.MorePartitions, "%+v", c.at)
		require.Equal(t, c.moreGs, info.MoreGroups, "%+v", c.at)
		require.Equal(t, int64(5), info.Messages, "the whole queue's, on every page")
		require.Equal(t, int64(5), info.PartitionCount)
		require.Equal(t, int64(3), info.GroupCount)
	}

	for _, q := range []string{"r", "s"} {
		pushN(t, st, q, "p", 0, 1)
	}
	list, err := st.List(ctx, domain.ListParams{Limit: 2})
	require.NoError(t, err)
	require.True(t, list.More)
	require.Equal(t, []string{"q", "r"}, []string{list.Queues[0].Name, list.Queues[1].Name})
	list, err = st.List(ctx, domain.ListParams{Limit: 2, After: "r"})
	require.NoError(t, err)
	require.False(t, list.More)
	require.Len(t, list.Queues, 1)
	require.Equal(t, "s", list.Queues[0].Name)
}

func TestInfoListDelete(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "b", "p1", 0, 3)
	pushN(t, st, "b", "p2", 0, 2)
	pushN(t, st, "a", "p", 0, 1)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("b"), Group: "g", Partition: "p1", Max: 2})
	require.NoError(t, err)
	require.True(t, ack(t, st, "b", "g", domain.Ack{Partition: "p1", Offset: 1, Lease: ms[0].Lease})[0].OK)

	info, err := st.Info(ctx, domain.InfoParams{Queue: domain.Global("b"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, int64(5), info.Messages)
	require.Equal(t, int64(5), info.Bytes)
	require.Len(t, info.Partitions, 2)
	require.Equal(t, []domain.GroupInfo{{Name: "g", Pending: 3, Leased: 0}}, info.Groups)

	page, err := st.List(ctx, domain.ListParams{Tenant: "", Limit: 1000})
	list := page.Queues
	require.False(t, page.More)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "a", list[0].Name)
	require.Equal(t, domain.QueueSummary{Name: "b", Partitions: 2, Messages: 5, Bytes: 5, Groups: 1, Pending: 3}, list[1])

	require.NoError(t, st.Delete(ctx, domain.Global("b")))
	require.ErrorIs(t, st.Delete(ctx, domain.Global("b")), domain.ErrNotFound)
	_, err = st.Info(ctx, domain.InfoParams{Queue: domain.Global("b"), Limit: 1000})
	require.ErrorIs(t, err, domain.ErrNotFound)
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
	_, err := st.Configure(ctx, domain.Global("q"), domain.ConfigPatch{MaxMessageBytes: &small})
	require.NoError(t, err)
	dp := protocol.DefaultPartition
	outs := push(t, st,
		domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{{Partition: dp, Data: []byte("fits")}}},
		domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{{Partition: dp, Data: []byte("fits")}, {Partition: dp, Data: make([]byte, 11)}}})
	require.NoError(t, outs[0].Err)
	require.Equal(t, []domain.PushResult{{Partition: dp, Offset: 0, Status: domain.Stored}}, outs[0].Results)
	require.ErrorIs(t, outs[1].Err, domain.ErrTooLarge)
	require.Nil(t, outs[1].Results)
	info, err := st.Info(ctx, domain.InfoParams{Queue: domain.Global("q"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Messages, "the refused request stored nothing")
}

func TestPopTrimmedToMaxBytesGivesBackTheRest(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "q", "a", 0, 5)
	pushN(t, st, "q", "b", 0, 5)
	size := func(*domain.Message) int { return 10 }

	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10, Partitions: 2, MaxBytes: 30, SizeOf: size})
	require.NoError(t, err)
	require.Len(t, ms, 3, "three 10-byte messages fit in 30")
	first := ms[0].Partition
	// Acking the last message returned ends the lease: nothing beyond it
	// stayed leased.
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: first, Offset: 2, Lease: ms[0].Lease})[0].OK)
	// The other partition returned nothing and was released at once; the
	// rest of both comes with attempt 1, having never been seen.
	rest, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 100, Partitions: 2})
	require.NoError(t, err)
	require.Len(t, rest, 7)
	for _, m := range rest {
		require.Equal(t, 1, m.Attempt)
	}

	// Auto-ack: what did not fit is not lost.
	pushN(t, st, "auto", "p", 0, 4)
	got := 0
	for range 4 {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("auto"), Max: 10, AutoAck: true, MaxBytes: 15, SizeOf: size})
		require.NoError(t, err)
		require.Len(t, ms, 1, "at least one message, even over the bound's half")
		require.Equal(t, int64(got), ms[0].Offset)
		got++
	}
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("auto"), AutoAck: true})
	require.NoError(t, err)
	require.Empty(t, ms)
}

func TestMadeUpLeaseSaysSo(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pushN(t, st, "q", "p", 0, 1)
	_, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	res := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: "l-x"})
	require.Contains(t, res[0].Error, "lease expired or not held")
}

// A message pops back with the encoding it was pushed with: the store keeps
// what the decoder said, and a reply need not look at the bytes again.
func TestPopReturnsPushedEncoding(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	msgs := []domain.PushMessage{
		{Partition: "a", ID: "j1", Data: []byte(`{"sku":42}`), Encoding: domain.EncodingJSON},
		{Partition: "a", ID: "b1", Data: []byte{0xff, 0x00, 0x01, 0x02, 0x03}, Encoding: domain.EncodingBinary},
		{Partition: "b", ID: "b2", Data: []byte("not json"), Encoding: domain.EncodingBinary},
		{Partition: "b", ID: "j2", Data: []byte(`"text"`), Encoding: domain.EncodingJSON},
		{Partition: "a", ID: "b3", Data: []byte{}, Encoding: domain.EncodingBinary},
		{Partition: "b", ID: "j3", Data: []byte(`[1,2,3]`), Encoding: domain.EncodingJSON},
	}
	// Two requests in one transaction and a later push: segments of several
	// messages and several segments per partition.
	outs := push(t, st,
		domain.PushParams{Queue: domain.Global("q"), Messages: msgs[:2]},
		domain.PushParams{Queue: domain.Global("q"), Messages: msgs[2:4]})
	for _, out := range outs {
		require.NoError(t, out.Err)
	}
	out := push(t, st, domain.PushParams{Queue: domain.Global("q"), Messages: msgs[4:]})[0]
	require.NoError(t, out.Err)

	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 100, Partitions: 2})
	require.NoError(t, err)
	require.Len(t, ms, len(msgs))
	byID := map[string]domain.PushMessage{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	seen := map[string]bool{}
	for _, m := range ms {
		want, ok := byID[m.ID]
		require.True(t, ok, "unexpected message %q", m.ID)
		require.False(t, seen[m.ID], "message %q popped twice", m.ID)
		seen[m.ID] = true
		require.Equal(t, want.Encoding, m.Encoding, "message %q", m.ID)
		require.Equal(t, want.Data, m.Data, "message %q", m.ID)
		require.Equal(t, want.Partition, m.Partition, "message %q", m.ID)
	}
}

// Dead letters keep their message's encoding, and a replay pushes it again
// with it.
func TestDeadLettersKeepEncoding(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	out := push(t, st, domain.PushParams{Queue: domain.Global("q"), Messages: []domain.PushMessage{
		{Partition: "p", ID: "j", Data: []byte(`{"a":1}`), Encoding: domain.EncodingJSON},
		{Partition: "p", ID: "b", Data: []byte{0x80, 0x81}, Encoding: domain.EncodingBinary},
	}})[0]
	require.NoError(t, out.Err)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, []domain.AckResult{{OK: true, Dead: true, DeadBytes: 7}, {OK: true, Dead: true, DeadBytes: 2}}, ack(t, st, "q", "",
		domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckDead},
		domain.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: domain.AckDead}))

	dls, _, err := st.DeadLetters(ctx, domain.DLQParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Len(t, dls, 2)
	require.Equal(t, "j", dls[0].ID)
	require.Equal(t, domain.EncodingJSON, dls[0].Encoding)
	require.Equal(t, []byte(`{"a":1}`), dls[0].Data)
	require.Equal(t, "b", dls[1].ID)
	require.Equal(t, domain.EncodingBinary, dls[1].Encoding)
	require.Equal(t, []byte{0x80, 0x81}, dls[1].Data)

	n, err := st.ReplayDeadLetters(ctx, domain.Global("q"), []string{dls[0].DLQID, dls[1].DLQID})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, []int64{2, 3}, []int64{ms[0].Offset, ms[1].Offset})
	require.Equal(t, []domain.Encoding{domain.EncodingJSON, domain.EncodingBinary}, []domain.Encoding{ms[0].Encoding, ms[1].Encoding})
	require.Equal(t, []string{`{"a":1}`, "\x80\x81"}, datas(ms))
}

// plainFrames frames messages as segments did before migration 0004
// (frame format 0): uvarint(len(id)) id uvarint(len(data)) data.
func plainFrames(ids []string, datas [][]byte) []byte {
	var buf []byte
	for i := range ids {
		buf = binary.AppendUvarint(buf, uint64(len(ids[i])))
		buf = append(buf, ids[i]...)
		buf = binary.AppendUvarint(buf, uint64(len(datas[i])))
		buf = append(buf, datas[i]...)
	}
	return buf
}

// A segment written before encodings were recorded pops back byte for
// byte, with the encoding unknown, next to segments of the new format.
func TestOldFrameFormatPopsAsUnknown(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	require.Equal(t, []int64{0}, pushN(t, st, "q", "p", 0, 1)) // creates the partition

	// Lengths 7, 5 and 5: read as the new format, their low bits would
	// pass for an encoding and the rest for a length of 1.
	ids := []string{"old-1", "", "old-3"}
	data := [][]byte{[]byte(`{"x":1}`), {0x00, 0x01, 0x02, 0xfe, 0xff}, []byte("hello")}
	var size int64
	for _, d := range data {
		size += int64(len(d))
	}
	tag, err := st.Pool().Exec(ctx, `
		WITH p AS (
		    UPDATE comb_partitions SET next_offset = next_offset + $1, retained_bytes = retained_bytes + $2
		    WHERE queue_id = (SELECT id FROM comb_queues WHERE name = $3) AND name = $4
		    RETURNING id, next_offset - $1 AS base)
		INSERT INTO comb_segments (partition_id, base_offset, count, bytes, payload, frame_format)
		SELECT id, base, $1, $2, $5, 0 FROM p`,
		int64(len(ids)), size, "q", "p", plainFrames(ids, data))
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
	require.Equal(t, []int64{4}, pushN(t, st, "q", "p", 4, 1), "a later push follows the old segment")

	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Len(t, ms, 5)
	for i, m := range ms {
		require.Equal(t, int64(i), m.Offset)
		require.Equal(t, "p", m.Partition)
		require.Equal(t, 1, m.Attempt)
	}
	require.Equal(t, "0", string(ms[0].Data))
	require.Equal(t, domain.EncodingJSON, ms[0].Encoding)
	for i := range ids {
		m := ms[1+i]
		require.Equal(t, ids[i], m.ID)
		require.Equal(t, data[i], m.Data)
		require.Equal(t, domain.EncodingUnknown, m.Encoding)
	}
	require.Equal(t, "4", string(ms[4].Data))
	require.Equal(t, domain.EncodingJSON, ms[4].Encoding)

	// Dead-lettering reads the old frames too.
	require.Equal(t, []domain.AckResult{{OK: true, Settled: 2, Dead: true, DeadBytes: 5}, {OK: true, Settled: 2}}, ack(t, st, "q", "",
		domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease, Status: domain.AckDead},
		domain.Ack{Partition: "p", Offset: 4, Lease: ms[0].Lease}))
	dls, _, err := st.DeadLetters(ctx, domain.DLQParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, int64(2), dls[0].Offset)
	require.Empty(t, dls[0].ID)
	require.Equal(t, data[1], dls[0].Data)
	require.Equal(t, domain.EncodingUnknown, dls[0].Encoding)
	ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Empty(t, ms)
}

// An auto-ack pop trimmed to MaxBytes settles only what it returns: the
// next pop returns exactly the messages that did not fit, nothing lost and
// nothing twice, whether the trim left a partition untouched (30 bytes:
// three messages of the first partition) or cut into the second (70: five
// and two).
func TestAutoAckPopTrimmedToMaxBytesGivesBackTheRest(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	size := func(*domain.Message) int { return 10 }
	for _, tc := range []struct{ maxBytes, fit int }{{30, 3}, {70, 7}} {
		t.Run(strconv.Itoa(tc.maxBytes), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			queue := "auto" + strconv.Itoa(tc.maxBytes)
			pushN(t, st, queue, "a", 0, 5)
			pushN(t, st, queue, "b", 0, 5)

			ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global(queue), Max: 10, Partitions: 2, AutoAck: true, MaxBytes: tc.maxBytes, SizeOf: size})
			require.NoError(t, err)
			require.Len(t, ms, tc.fit)
			rest, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global(queue), Max: 100, Partitions: 2, AutoAck: true})
			require.NoError(t, err)
			require.Len(t, rest, 10-tc.fit, "exactly what did not fit comes next")

			byPart := map[string][]int64{}
			for _, m := range append(append([]domain.Message(nil), ms...), rest...) {
				require.Empty(t, m.Lease)
				require.Equal(t, 1, m.Attempt)
				require.Equal(t, strconv.FormatInt(m.Offset, 10), string(m.Data))
				byPart[m.Partition] = append(byPart[m.Partition], m.Offset)
			}
			want := []int64{0, 1, 2, 3, 4}
			require.Equal(t, map[string][]int64{"a": want, "b": want}, byPart,
				"each partition's messages once each, in order, across the two pops")

			ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global(queue), Max: 100, Partitions: 2, AutoAck: true})
			require.NoError(t, err)
			require.Empty(t, ms)
		})
	}
}

// TestConcurrentPartitionCreation: pushes on two stores (two brokers)
// create the same new partitions at once, named in opposite orders. None
// fails: the partitions are created in name order, so one push waits for
// the other rather than deadlocking with it.
func TestConcurrentPartitionCreation(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	ctx := ctxT(t)
	open := func() *store.Store {
		st, err := store.Open(ctx, url, store.Options{MaxConns: 8})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		require.NoError(t, st.Migrate(ctx))
		return st
	}
	stores := []*store.Store{open(), open()}
	for round := range 10 {
		queue := "q" + strconv.Itoa(round)
		configure(t, stores[0], queue, domain.ConfigPatch{})
		errs := make(chan error, 8)
		for w := range 8 {
			go func() {
				var ms []domain.PushMessage
				for i := range 20 {
					p := i
					if w%2 == 1 {
						p = 19 - i
					}
					ms = append(ms, domain.PushMessage{Partition: "p" + strconv.Itoa(p), Data: []byte("1"), Encoding: domain.EncodingJSON})
				}
				outs, err := stores[w%2].Push(ctx, []domain.PushParams{{Queue: domain.Global(queue), Messages: ms}})
				if err == nil {
					err = outs[0].Err
				}
				errs <- err
			}()
		}
		for range 8 {
			require.NoError(t, <-errs)
		}
	}
}

// A pop that reads every cursor of its group reports the ready partitions
// it did not lease, and that they were all of them; a pop limited to
// candidates leases none but them, finds them by key, and reports the same
// way among them. A partition given back because the reply could not carry
// it is reported ready again.
func TestPopReportsReadyPartitions(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	for _, p := range []string{"a", "b", "c"} {
		pushN(t, st, "q", p, 0, 2)
	}
	q := domain.Global("q")
	res, err := st.PopReport(ctx, domain.PopParams{Queue: q, Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Messages, 2)
	leased := res.Messages[0].Partition
	require.True(t, res.ReadyKnown)
	require.ElementsMatch(t, slices.DeleteFunc([]string{"a", "b", "c"}, func(p string) bool { return p == leased }), res.Ready)

	// Candidates: an unready one, a ready one, and one never pushed to.
	other := res.Ready[0]
	res, err = st.PopReport(ctx, domain.PopParams{Queue: q, Max: 10, Candidates: []string{leased, other, "nobody"}})
	require.NoError(t, err)
	require.Len(t, res.Messages, 2)
	require.Equal(t, other, res.Messages[0].Partition)
	require.True(t, res.ReadyKnown)
	require.Empty(t, res.Ready, "the third ready partition was no candidate")
	res, err = st.PopReport(ctx, domain.PopParams{Queue: q, Candidates: []string{leased, other, "nobody"}})
	require.NoError(t, err)
	require.Empty(t, res.Messages, "both candidates are leased")
	require.False(t, res.ReadyKnown, "a pop that leased nothing knows nothing")

	// The last ready partition, trimmed to one message: it is ready again.
	size := func(*domain.Message) int { return 10 }
	res, err = st.PopReport(ctx, domain.PopParams{Queue: q, Max: 10, MaxBytes: 10, SizeOf: size})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	last := res.Messages[0].Partition
	require.Equal(t, []string{last}, res.Ready)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: last, Offset: 0, Lease: res.Messages[0].Lease})[0].OK)
	res, err = st.PopReport(ctx, domain.PopParams{Queue: q, Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	require.Equal(t, int64(1), res.Messages[0].Offset, "the message given back comes next")
	require.Empty(t, res.Ready)
	require.True(t, res.ReadyKnown)
}

// A pop of several partitions claims their cursors before it spreads its
// max over them: the ones its max did not reach stay ready, and were held
// locked meanwhile (concurrent pops skipped them). It reports them as
// Kept, and so a partition it gave back; a pop whose max reaches every
// partition it claimed keeps none.
func TestPopReportsKeptPartitions(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	for _, p := range []string{"a", "b", "c"} {
		pushN(t, st, "q", p, 0, 5)
	}
	q := domain.Global("q")
	res, err := st.PopReport(ctx, domain.PopParams{Queue: q, Max: 5, Partitions: 3})
	require.NoError(t, err)
	require.Len(t, res.Messages, 5)
	first := res.Messages[0].Partition
	rest := slices.DeleteFunc([]string{"a", "b", "c"}, func(p string) bool { return p == first })
	require.ElementsMatch(t, rest, res.Kept, "claimed, and the max ran out before them")
	require.ElementsMatch(t, rest, res.Ready)

	res, err = st.PopReport(ctx, domain.PopParams{Queue: q, Max: 100, Partitions: 3})
	require.NoError(t, err)
	require.Len(t, res.Messages, 10)
	require.Empty(t, res.Kept)

	// Given back: the reply carried one message of a partition's five.
	pushN(t, st, "q", "d", 0, 5)
	size := func(*domain.Message) int { return 10 }
	res, err = st.PopReport(ctx, domain.PopParams{Queue: q, Max: 10, MaxBytes: 10, SizeOf: size})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	require.Equal(t, []string{"d"}, res.Kept)
}

// TestDebugLogsLeasesAndAcks: at debug level the store logs each lease a
// pop takes and each ack with what it did, the lines the cluster test
// prints when a message comes twice as one attempt (leasesOf).
func TestDebugLogsLeasesAndAcks(t *testing.T) {
	t.Parallel()
	var buf testenv.Buffer
	ctx := ctxT(t)
	st, err := store.Open(ctx, testURL(t), store.Options{MaxConns: 4,
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))
	pushN(t, st, "q", "p", 0, 4)
	ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 4})
	require.NoError(t, err)
	require.Len(t, ms, 4)
	lease := ms[0].Lease
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 1, Lease: lease})[0].OK)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 2, Lease: lease, Status: domain.AckRetry})[0].OK)
	require.False(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 3, Lease: lease})[0].OK)

	var lines []string
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, "lease="+lease) {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 4, buf.String())
	require.Contains(t, lines[0], `msg="pop leased"`)
	require.Contains(t, lines[0], "from=0 to=3 returned_to=3 delivered_before=-1")
	require.Contains(t, lines[1], `msg="ack applied"`)
	require.Contains(t, lines[1], "offset=1 status=completed ok=true")
	require.Contains(t, lines[2], "offset=2 status=retry ok=true")
	require.Contains(t, lines[2], "committed=2 attempts=0 lease_ended=true")
	require.Contains(t, lines[3], "offset=3 status=completed ok=false")

	// A hand-off logs its lease as a pop does.
	_, handed, err := st.PushOffer(ctx, []domain.PushParams{{Queue: domain.Global("q"), Messages: []domain.PushMessage{
		{Partition: "fresh", Data: []byte("1"), Encoding: domain.EncodingJSON}}}},
		[]domain.Offer{{Pop: domain.PopParams{Queue: domain.Global("q"), Max: 5}, Partition: "fresh"}})
	require.NoError(t, err)
	require.Len(t, handed[0].Messages, 1)
	require.Contains(t, buf.String(), `msg="handoff leased" group="" partition=fresh partition_id=`)
	require.Contains(t, buf.String(), "lease="+handed[0].Messages[0].Lease+" from=0 to=0")
}
