package bridge_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/internal/combtest"
)

// TestLongPollWokenWhenDelayPasses: a message of a queue with delay_ms is
// not delivered before the delay, and a long poll waiting for it is woken
// when the delay passes — not by the hourly safety net.
func TestLongPollWokenWhenDelayPasses(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	call(t, nc, "comb.configure.delayed", `{"delay_ms":300}`, nil)

	got := make(chan []msgOut, 1)
	go func() {
		var rep struct {
			Messages []msgOut `json:"messages"`
		}
		m, err := nc.Request("comb.pop.delayed", []byte(`{"wait_ms":8000}`), reqTimeout)
		if err == nil {
			err = json.Unmarshal(m.Data, &rep)
		}
		if err != nil {
			t.Error(err)
		}
		got <- rep.Messages
	}()
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 })
	pushed := time.Now()
	push(t, nc, "delayed", `{"messages":[{"data":"later"}]}`)
	select {
	case msgs := <-got:
		require.Len(t, msgs, 1)
		require.Equal(t, `"later"`, string(msgs[0].Data))
		require.GreaterOrEqual(t, time.Since(pushed), 300*time.Millisecond, "not before the delay")
		require.Less(t, time.Since(pushed), 5*time.Second, "woken when the delay passed")
	case <-time.After(reqTimeout):
		t.Fatal("long poll was not woken after the delay")
	}
}

func TestSeek(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "sk", `{"messages":[{"partition":"a","data":1},{"partition":"a","data":2},{"partition":"b","data":3}]}`)

	var moved struct {
		Moved int `json:"moved"`
	}
	call(t, nc, "comb.seek.sk", `{"group":"g","to":"end"}`, &moved)
	require.Equal(t, 2, moved.Moved)
	require.Empty(t, pop(t, nc, "sk", `{"group":"g","partitions":2}`))

	call(t, nc, "comb.seek.sk", `{"group":"g","partition":"a","to":"start"}`, &moved)
	require.Equal(t, 1, moved.Moved)
	msgs := pop(t, nc, "sk", `{"group":"g","partitions":2}`)
	require.Len(t, msgs, 2)
	require.Equal(t, "1", string(msgs[0].Data))

	call(t, nc, "comb.seek.sk", `{"group":"g","to":"`+time.Now().Add(time.Hour).Format(time.RFC3339)+`"}`, &moved)
	require.Equal(t, 2, moved.Moved)
	require.Empty(t, pop(t, nc, "sk", `{"group":"g","partitions":2}`))

	requireError(t, request(t, nc, "comb.seek.sk", `{"group":"g"}`), 400, "to: required")
	requireError(t, request(t, nc, "comb.seek.sk", `{"to":"yesterday"}`), 400, "not start, end or an RFC 3339 time")
	requireError(t, request(t, nc, "comb.seek.nope", `{"to":"start"}`), 404, "not found")
	// A bad request moved nothing: the group still sits at the end.
	require.Empty(t, pop(t, nc, "sk", `{"group":"g","partitions":2}`))
}

// TestExpiredLeaseReachesAWaitingPop: once a pop of the group has found
// nothing, further long polls park without asking PostgreSQL until a
// wake-up (see waitQueue.empty); a lease that expires makes messages ready
// without one, and the retry interval still brings them to the waiting
// pop.
func TestExpiredLeaseReachesAWaitingPop(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: 200 * time.Millisecond}})
	nc := env.NC
	push(t, nc, "exp", `{"messages":[{"partition":"a","data":1}]}`)
	first := pop(t, nc, "exp", `{"lease_ms":500,"wait_ms":1000}`)
	require.Len(t, first, 1)
	start := time.Now()
	again := pop(t, nc, "exp", `{"wait_ms":5000}`)
	require.Len(t, again, 1, "the expired lease's message is delivered again")
	require.Equal(t, first[0].Offset, again[0].Offset)
	require.Equal(t, 2, again[0].Attempt)
	// Within the lease plus about one retry interval (0.7 s); the bound
	// is looser, for a loaded machine, and still well before wait_ms.
	require.Less(t, time.Since(start), 4*time.Second, "within the lease plus about one retry interval")
}
