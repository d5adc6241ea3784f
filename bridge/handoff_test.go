package bridge_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/internal/combtest"
)

// TestPushAnswersWaitingPop: a long poll of a group with nothing else to
// deliver is answered by the push itself, in the push's transaction,
// without a pop statement of its own; the message is leased to it as a
// pop's would be.
func TestPushAnswersWaitingPop(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	push(t, nc, "h", `{"messages":[{"data":0}]}`)
	first := pop(t, nc, "h", `{}`)
	require.Len(t, first, 1)
	require.True(t, ack(t, nc, "h", ackBody("default", first[0], "completed"))[0].OK)

	got := longPollBody(t, env, "h", `{"wait_ms":8000}`)
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 })
	before := env.Bridge.Stats()
	res := push(t, nc, "h", `{"messages":[{"id":"one","data":{"n":1}}]}`)
	msgs := recv(t, got, "a long poll")
	require.Len(t, msgs, 1)
	m := msgs[0]
	require.Equal(t, *res[0].Offset, m.Offset)
	require.Equal(t, `{"n":1}`, string(m.Data))
	require.Equal(t, "one", m.ID)
	require.Equal(t, 1, m.Attempt)
	require.NotEmpty(t, m.Lease)
	require.WithinDuration(t, time.Now(), m.CreatedAt, time.Minute)

	after := env.Bridge.Stats()
	require.Equal(t, before.PopHandoffs+1, after.PopHandoffs)
	require.Equal(t, before.PopStoreCalls, after.PopStoreCalls, "no pop statement")
	require.Zero(t, after.Waiting)
	require.Empty(t, pop(t, nc, "h", `{}`), "leased to the long poll")
	require.True(t, ack(t, nc, "h", ackBody("default", m, "completed"))[0].OK)
	require.Empty(t, pop(t, nc, "h", `{}`))
}

// TestPushLeavesBusyGroupToItsPops: a push does not answer a waiting pop
// whose group holds a lease on the partition; the pop waits on and gets
// the message when the lease is acked, in order.
func TestPushLeavesBusyGroupToItsPops(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	push(t, nc, "b", `{"messages":[{"data":1}]}`)
	held := pop(t, nc, "b", `{}`)
	require.Len(t, held, 1)

	got := longPollBody(t, env, "b", `{"wait_ms":8000}`)
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 })
	push(t, nc, "b", `{"messages":[{"data":2}]}`)
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 }) // back to waiting after its own try
	require.Zero(t, env.Bridge.Stats().PopHandoffs)
	select {
	case msgs := <-got:
		t.Fatalf("answered while the partition was leased: %v", msgs)
	case <-time.After(100 * time.Millisecond):
	}
	require.True(t, ack(t, nc, "b", ackBody("default", held[0], "completed"))[0].OK)
	msgs := recv(t, got, "a long poll")
	require.Len(t, msgs, 1)
	require.Equal(t, `2`, string(msgs[0].Data))
	require.Equal(t, held[0].Offset+1, msgs[0].Offset)
}

// TestPushAnswersAPopPerGroup: waiting pops of two groups each get the
// message; a second waiter of one group keeps waiting.
func TestPushAnswersAPopPerGroup(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	push(t, nc, "g", `{"messages":[{"data":0}]}`)
	for _, g := range []string{"a", "b"} {
		ms := pop(t, nc, "g", `{"group":"`+g+`"}`)
		require.Len(t, ms, 1)
		require.True(t, ack(t, nc, "g", ackBody(g, ms[0], "completed"))[0].OK)
	}
	a := longPollBody(t, env, "g", `{"group":"a","wait_ms":1500}`)
	a2 := longPollBody(t, env, "g", `{"group":"a","wait_ms":1500}`)
	b := longPollBody(t, env, "g", `{"group":"b","wait_ms":8000}`)
	waitFor(t, func() bool { return env.Bridge.Waiting() == 3 })
	push(t, nc, "g", `{"messages":[{"data":1}]}`)
	msgs := recv(t, b, "a long poll")
	require.Len(t, msgs, 1)
	require.Equal(t, `1`, string(msgs[0].Data))
	// One of group a's pops gets it; the other's wait ends with nothing.
	msgs = append(recv(t, a, "a long poll"), recv(t, a2, "a long poll")...)
	require.Len(t, msgs, 1)
	require.Equal(t, `1`, string(msgs[0].Data))
	require.Equal(t, int64(2), env.Bridge.Stats().PopHandoffs)
}

// TestLongPollsStartingTogetherScanOnce: long polls of a group that start
// at once, nothing known of it, read its cursors in one pop statement.
func TestLongPollsStartingTogetherScanOnce(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	call(t, env.NC, "comb.configure.s", ``, nil)
	const polls = 20
	var got []<-chan []msgOut
	for range polls {
		got = append(got, longPollBody(t, env, "s", `{"wait_ms":1500}`))
	}
	waitFor(t, func() bool { return env.Bridge.Waiting() == polls })
	require.Equal(t, int64(1), env.Bridge.Stats().PopScans)
	for _, ch := range got {
		require.Empty(t, recv(t, ch, "a long poll"))
	}
}
