package bridge_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/store"
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

// TestSeekWakesOtherBridgesToReread: a seek's wake-up tells every bridge
// to read the group anew. A bridge whose store cached the group for an
// hour, its marking done, does not see a seek of the whole group back to
// the start made behind its back (the pops find the ready set as it was:
// nothing) until the wake-up a seek sends arrives; then its pops find
// every message again. The seek's own wake-up carries that word.
func TestSeekWakesOtherBridgesToReread(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{
		Store:         store.Options{QueueCacheTTL: time.Hour},
		SweepInterval: 20 * time.Millisecond,
		Bridge:        bridge.Config{RetryInterval: time.Hour},
	})
	nc := env.NC
	call(t, nc, "comb.configure.sw", ``, nil)
	for i := range 6 {
		push(t, nc, "sw", `{"messages":[{"partition":"p`+strconv.Itoa(i)+`","data":1}]}`)
	}
	got := 0
	for range 10 {
		got += len(pop(t, nc, "sw", `{"group":"g","max":100,"partitions":10,"auto_ack":true}`))
	}
	require.Equal(t, 6, got)
	// The sweeper takes g's rows out of the ready set: it is caught up.
	waitFor(t, func() bool {
		var n int
		require.NoError(t, env.Store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM comb_ready`).Scan(&n))
		return n == 0
	})

	// Another broker's seek, behind this bridge's back.
	other, err := store.Open(t.Context(), env.PostgresURL, store.Options{})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	_, err = other.Seek(t.Context(), domain.SeekParams{Queue: domain.Global("sw"), Group: "g", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	require.Empty(t, pop(t, nc, "sw", `{"group":"g","max":100,"partitions":10,"auto_ack":true}`), "the ready set as this bridge last saw it")

	// The wake-up the other broker's bridge would send.
	wakeSubject := protocol.InternalPrefix + ".comb.wake.sw"
	require.NoError(t, nc.Publish(wakeSubject, []byte("!g\n")))
	got = 0
	waitFor(t, func() bool {
		got += len(pop(t, nc, "sw", `{"group":"g","max":100,"partitions":10,"auto_ack":true}`))
		return got >= 6
	})
	require.Equal(t, 6, got, "read anew, every message again")

	// And a seek through a bridge sends it.
	wakes, err := nc.SubscribeSync(wakeSubject)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	call(t, nc, "comb.seek.sw", `{"group":"g","to":"start"}`, nil)
	m, err := wakes.NextMsg(reqTimeout)
	require.NoError(t, err)
	require.Equal(t, "!g\n", string(m.Data))
}
