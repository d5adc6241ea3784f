package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

// TestHeadersTravelWithTheMessage: headers pushed with a message come back
// on pop and peek, stay with it into the dead letters and out again on a
// replay; a message without headers has none; they count toward the
// queue's max_message_bytes.
func TestHeadersTravelWithTheMessage(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	h := domain.Headers(`{"X-Tenant":["acme"],"traceparent":["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]}`)
	res := pushIDs(t, st, "q",
		domain.PushMessage{Partition: "p", Data: []byte(`{"n":1}`), Encoding: domain.EncodingJSON, Headers: h},
		domain.PushMessage{Partition: "p", Data: []byte("2"), Encoding: domain.EncodingJSON})
	require.Len(t, res, 2)

	got, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, h, got[0].Headers)
	require.Nil(t, got[1].Headers)
	require.Equal(t, `{"n":1}`, string(got[0].Data))

	page, err := st.Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: "p", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, h, page.Messages[0].Headers)
	require.Nil(t, page.Messages[1].Headers)

	require.True(t, ack(t, st, "q", "default", domain.Ack{Partition: "p", Offset: 0, Lease: got[0].Lease, Status: domain.AckDead})[0].OK)
	dls, _, err := st.DeadLetters(ctx, domain.DLQParams{Queue: domain.Global("q"), Limit: 10})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, h, dls[0].Headers)
	n, err := st.ReplayDeadLetters(ctx, domain.Global("q"), []string{dls[0].DLQID})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	page, err = st.Peek(ctx, domain.PeekParams{Queue: domain.Global("q"), Partition: "p", From: 2, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	require.Equal(t, h, page.Messages[0].Headers, "a replay keeps the headers")

	// Data and headers together over max_message_bytes: refused, whole.
	configure(t, st, "small", domain.ConfigPatch{MaxMessageBytes: i64(10)})
	out := push(t, st, domain.PushParams{Queue: domain.Global("small"), Messages: []domain.PushMessage{
		{Partition: "p", Data: []byte("12345"), Headers: domain.Headers(`{"a":["b"]}`)}}})[0]
	require.ErrorIs(t, out.Err, domain.ErrTooLarge)
	require.ErrorContains(t, out.Err, "16 bytes")
}

// TestDelayedMessageHoldsItsPartition: a message pushed with a delay is
// not delivered before its time, and neither is any later message of its
// partition (order is kept); earlier messages and other partitions go at
// once. Once the time has passed everything is delivered in order, and the
// sweeper forgets the hold.
func TestDelayedMessageHoldsItsPartition(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	const delay = 1500
	pushed := time.Now()
	pushIDs(t, st, "q",
		domain.PushMessage{Partition: "p", Data: []byte("0"), Encoding: domain.EncodingJSON},
		domain.PushMessage{Partition: "p", Data: []byte("1"), Encoding: domain.EncodingJSON, DelayMS: delay},
		domain.PushMessage{Partition: "p", Data: []byte("2"), Encoding: domain.EncodingJSON},
		domain.PushMessage{Partition: "other", Data: []byte("3"), Encoding: domain.EncodingJSON})
	pushIDs(t, st, "q", domain.PushMessage{Partition: "p", Data: []byte("4"), Encoding: domain.EncodingJSON})

	pop := func(group, partition string) []domain.Message {
		got, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Group: group, Partition: partition, Max: 10, Partitions: 10, AutoAck: true})
		require.NoError(t, err)
		return got
	}
	require.ElementsMatch(t, []string{"0", "3"}, datas(pop("a", "")), "only what is before the held message, and the other partition")
	require.Equal(t, []string{"0"}, datas(pop("b", "p")), "a pop naming the partition is held too")
	if time.Since(pushed) < delay*time.Millisecond-200*time.Millisecond {
		require.Empty(t, pop("a", ""), "still held")
	}
	var rest []domain.Message
	require.Eventually(t, func() bool {
		rest = pop("a", "")
		return len(rest) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(pushed), delay*time.Millisecond-100*time.Millisecond, "not delivered before its time (less the clocks' difference)")
	require.Equal(t, []string{"1", "2", "4"}, datas(rest), "in order once the hold is past")

	require.Eventually(t, func() bool {
		s, err := st.Sweep(ctx)
		require.NoError(t, err)
		return s.Holds > 0
	}, 10*time.Second, 100*time.Millisecond, "the sweeper forgets the past hold")
}

// TestNotBeforeHolds: not_before holds a message until a time; a time
// already past holds nothing.
func TestNotBeforeHolds(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushIDs(t, st, "q",
		domain.PushMessage{Partition: "p", Data: []byte("0"), Encoding: domain.EncodingJSON, NotBefore: time.Now().Add(-time.Hour)},
		domain.PushMessage{Partition: "p", Data: []byte("1"), Encoding: domain.EncodingJSON, NotBefore: time.Now().Add(time.Hour)},
		domain.PushMessage{Partition: "p", Data: []byte("2"), Encoding: domain.EncodingJSON})
	got, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"0"}, datas(got))
	require.True(t, ack(t, st, "q", "default", domain.Ack{Partition: "p", Offset: 0, Lease: got[0].Lease})[0].OK)
	got, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Empty(t, got, "held for an hour")

	// A seek past the held message moves on: the hold is at its offset.
	_, err = st.Seek(ctx, domain.SeekParams{Queue: domain.Global("q"), Group: "default", To: domain.Start{Kind: domain.StartNew}})
	require.NoError(t, err)
	pushIDs(t, st, "q", domain.PushMessage{Partition: "p", Data: []byte("3"), Encoding: domain.EncodingJSON})
	got, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("q"), Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"3"}, datas(got))

	// Deleting the queue takes its holds with it.
	var holds int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_holds`).Scan(&holds))
	require.Equal(t, 1, holds, "the not_before already past holds nothing and is not recorded")
	require.NoError(t, st.Delete(ctx, domain.Global("q")))
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM comb_holds`).Scan(&holds))
	require.Zero(t, holds)
}
