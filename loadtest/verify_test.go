package loadtest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// batch is one push request as the verifier sees it: the headers its
// messages carry.
type batch []header

// send begins a push request of n messages on (producer, partition) the
// way runner.send does and returns its headers; answer it with v.finish.
func send(v *verifier, producer, partition, n int) batch {
	first, floor := v.begin(producer, partition, n)
	b := make(batch, n)
	for i := range b {
		b[i] = header{Index: uint16(i), Run: v.run, Producer: uint32(producer), Partition: uint32(partition), Seq: first + uint64(i), Floor: floor}
	}
	return b
}

func answer(v *verifier, b batch, stored bool) {
	v.finish(int(b[0].Producer), int(b[0].Partition), b[0].Seq, len(b), stored)
}

// deliver hands messages to the verifier in order and returns their refs.
func deliver(v *verifier, hs ...header) []ref {
	refs := make([]ref, len(hs))
	for i := range hs {
		refs[i] = v.observe(&hs[i])
	}
	return refs
}

func TestVerifyClean(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 2, 3, true, false)
	var all []batch
	for p := range 2 {
		for part := range 3 {
			for range 3 {
				b := send(v, p, part, 4)
				answer(v, b, true)
				all = append(all, b)
			}
		}
	}
	require.EqualValues(t, 2*3*3*4, v.unseenStored.Load())
	for _, b := range all {
		v.complete(deliver(v, b...))
	}
	require.Zero(t, v.unseenStored.Load())
	got := v.verdict()
	require.True(t, got.OK())
	require.Equal(t, Verdict{Checked: true, Sent: 72, Stored: 72, Delivered: 72}, got)
}

func TestVerifyMissing(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 3)
	answer(v, a, true)
	b := send(v, 0, 0, 3)
	answer(v, b, true)
	deliver(v, a...)
	got := v.verdict()
	require.False(t, got.OK())
	require.EqualValues(t, 3, got.Missing)
	require.EqualValues(t, 3, got.Delivered)
	require.Zero(t, got.OrderViolations)
	require.EqualValues(t, 3, v.unseenStored.Load(), "the drain waits for them")
}

func TestVerifyDuplicatesAreNotErrors(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 3)
	answer(v, a, true)
	// A lease expired (or its ack failed): the span comes again from its
	// first message, and only the second delivery is acked.
	deliver(v, a...)
	v.complete(deliver(v, a...))
	got := v.verdict()
	require.True(t, got.OK())
	require.EqualValues(t, 3, got.Duplicates)
	require.Zero(t, got.OrderViolations)
	require.EqualValues(t, 3, got.Delivered)
}

func TestVerifyAfterAck(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 3)
	answer(v, a, true)
	refs := deliver(v, a...)
	v.complete(refs[:2]) // the accepted ack covered the first two
	deliver(v, a[1:]...) // the broker hands back an acked message, then the rest
	got := v.verdict()
	require.False(t, got.OK())
	require.EqualValues(t, 2, got.Duplicates)
	require.EqualValues(t, 1, got.AfterAck)
	require.EqualValues(t, 1, got.OrderViolations)
	require.Zero(t, got.Skips)
}

func TestVerifyAutoAckRedeliveryIsAfterAck(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, true)
	a := send(v, 0, 0, 2)
	answer(v, a, true)
	deliver(v, a...)
	deliver(v, a[0])
	got := v.verdict()
	require.EqualValues(t, 1, got.AfterAck)
	require.False(t, got.OK())
}

func TestVerifySkipWithinARequest(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 3)
	answer(v, a, true)
	deliver(v, a[0], a[2], a[1])
	got := v.verdict()
	require.EqualValues(t, 1, got.Skips, "message 3 came before message 2 of one push")
	require.Zero(t, got.Missing)
	require.False(t, got.OK())
}

func TestVerifySkipAcrossRequests(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 2)
	answer(v, a, true)
	b := send(v, 0, 0, 2) // sent after a was answered: b's floor covers a
	require.EqualValues(t, 2, b[0].Floor)
	answer(v, b, true)
	deliver(v, b...)
	deliver(v, a...)
	got := v.verdict()
	require.EqualValues(t, 2, got.Skips, "both of b's messages came before a, which had to come first")
	require.Zero(t, got.Missing)
}

func TestVerifyConcurrentPushesHaveNoOrder(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 2)
	b := send(v, 0, 0, 2) // sent while a is in flight
	require.Zero(t, b[0].Floor)
	answer(v, b, true)
	answer(v, a, true)
	deliver(v, b...)
	deliver(v, a...)
	c := send(v, 0, 0, 1)
	require.EqualValues(t, 4, c[0].Floor)
	answer(v, c, true)
	deliver(v, c...)
	got := v.verdict()
	require.True(t, got.OK(), "%+v", got)
	require.Zero(t, got.Skips)
}

func TestVerifyFailedPushes(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 2)
	answer(v, a, false)
	b := send(v, 0, 0, 2)
	require.EqualValues(t, 2, b[0].Floor, "a failed push resolves the floor too")
	answer(v, b, true)
	c := send(v, 0, 0, 2)
	answer(v, c, false)
	// b arrives without a: a failed push is never required before another.
	deliver(v, b...)
	// c was stored after all (say the reply timed out), and arrives.
	deliver(v, c...)
	got := v.verdict()
	require.True(t, got.OK(), "%+v", got)
	require.EqualValues(t, 4, got.FailedPush)
	require.EqualValues(t, 2, got.FailedDelivered)
	require.EqualValues(t, 2, got.Stored)
	require.Zero(t, got.Missing)
	require.EqualValues(t, 4, got.Delivered)
}

func TestVerifyDeliveredBeforeTheReply(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, true, false)
	a := send(v, 0, 0, 2)
	// The consumer can see a message before its push reply reaches the
	// producer.
	deliver(v, a...)
	answer(v, a, true)
	require.Zero(t, v.unseenStored.Load())
	got := v.verdict()
	require.True(t, got.OK())
	require.EqualValues(t, 2, got.Delivered)
}

func TestVerifyForeignAndUnknown(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 2, true, false)
	a := send(v, 0, 1, 1)
	answer(v, a, true)
	deliver(v, a...)
	other := a[0]
	other.Run = 8
	unsent := a[0]
	unsent.Seq = 99
	badStream := a[0]
	badStream.Partition = 5
	refs := deliver(v, other, unsent, badStream)
	for _, r := range refs {
		require.Nil(t, r.s)
	}
	got := v.verdict()
	require.EqualValues(t, 1, got.Foreign)
	require.EqualValues(t, 2, got.Unknown)
	require.False(t, got.OK(), "a message of this run that was never sent is corruption")
}

func TestVerifyOffOnlyCountsSequences(t *testing.T) {
	t.Parallel()
	v := newVerifier(7, 1, 1, false, false)
	a := send(v, 0, 0, 3)
	answer(v, a, true)
	b := send(v, 0, 0, 3)
	require.EqualValues(t, 4, b[0].Seq)
	require.Zero(t, b[0].Floor)
	deliver(v, b...)
	got := v.verdict()
	require.False(t, got.Checked)
	require.True(t, got.OK())
}
