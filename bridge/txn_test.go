package bridge_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/internal/combtest"
)

// longPoll starts a pop of group that waits up to 8 s and returns its
// messages.
func longPoll(t *testing.T, env *combtest.Env, queue, group string) <-chan []msgOut {
	t.Helper()
	return longPollBody(t, env, queue, fmt.Sprintf(`{"group":%q,"wait_ms":8000}`, group))
}

// longPollBody starts a pop with body and returns its messages.
func longPollBody(t *testing.T, env *combtest.Env, queue, body string) <-chan []msgOut {
	t.Helper()
	got := make(chan []msgOut, 1)
	go func() {
		var rep struct {
			Messages []msgOut `json:"messages"`
		}
		m, err := env.NC.Request("comb.pop."+queue, []byte(body), reqTimeout)
		if err == nil {
			err = json.Unmarshal(m.Data, &rep)
		}
		if err != nil {
			t.Error(err)
		}
		got <- rep.Messages
	}()
	return got
}

func recv(t *testing.T, ch <-chan []msgOut, what string) []msgOut {
	t.Helper()
	select {
	case msgs := <-ch:
		return msgs
	case <-time.After(reqTimeout):
		t.Fatalf("%s: not woken", what)
		return nil
	}
}

// TestTxn: over NATS, a transaction acks and pushes together, wakes the
// pops its push and its ack made work for, and is refused whole with a 409
// when a lease is gone, with 400 for a bad body and 404 for an ack of a
// queue that does not exist.
func TestTxn(t *testing.T) {
	t.Parallel()
	// No safety-net retries: only wake-ups can end the polls early.
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	push(t, nc, "tin", `{"messages":[{"data":1},{"data":2}]}`)
	call(t, nc, "comb.configure.tout", `{"dedup_window_s":60}`, nil)
	first := pop(t, nc, "tin", `{"group":"g","max":1}`)
	require.Len(t, first, 1)

	// A consumer of g waits for tin (whose partition first's lease holds),
	// another for tout (empty).
	inPoll := longPoll(t, env, "tin", "g")
	outPoll := longPoll(t, env, "tout", "h")
	waitFor(t, func() bool { return env.Bridge.Waiting() == 2 })

	body := fmt.Sprintf(`{"acks":[{"queue":"tin","group":"g","offset":%d,"lease":%q}],
		"push":[{"queue":"tout","messages":[{"id":"in-0","data":{"done":1}}]},{"queue":"tside","messages":[{"data_b64":"AAE="}]}]}`,
		first[0].Offset, first[0].Lease)
	m := request(t, nc, "comb.txn", body)
	require.Empty(t, m.Header.Get("Nats-Service-Error-Code"), "%s", m.Data)
	require.JSONEq(t, `{"acks":[{"ok":true}],"push":[{"results":[{"partition":"default","offset":0,"status":"stored"}]},{"results":[{"partition":"default","offset":0,"status":"stored"}]}]}`, string(m.Data))

	got := recv(t, outPoll, "the pop of the queue pushed to")
	require.Len(t, got, 1)
	require.Equal(t, `{"done":1}`, string(got[0].Data))
	require.Equal(t, "in-0", got[0].ID)
	got = recv(t, inPoll, "the pop of the group whose lease the ack ended")
	require.Len(t, got, 1)
	require.Equal(t, "2", string(got[0].Data))

	// The same transaction again: the lease is gone, nothing is applied.
	requireError(t, request(t, nc, "comb.txn", body), 409, "acks[0]: lease expired or not held by this group")
	require.Equal(t, int64(1), info(t, nc, "tout").Messages)
	require.Equal(t, int64(1), info(t, nc, "tside").Messages)

	// The live lease of the second message, with the same producer id:
	// acked, and its output recognised as a duplicate.
	m = request(t, nc, "comb.txn", fmt.Sprintf(`{"acks":[{"queue":"tin","group":"g","offset":%d,"lease":%q}],
		"push":[{"queue":"tout","messages":[{"id":"in-0","data":{"done":1}}]}]}`, got[0].Offset, got[0].Lease))
	require.JSONEq(t, `{"acks":[{"ok":true}],"push":[{"results":[{"partition":"default","offset":0,"status":"duplicate"}]}]}`, string(m.Data))
	require.Empty(t, pop(t, nc, "tin", `{"group":"g"}`), "both inputs acked")

	requireError(t, request(t, nc, "comb.txn", `{"acks":[{"queue":"tin","offset":0}]}`), 400, "acks[0].lease: required")
	requireError(t, request(t, nc, "comb.txn", ``), 400, "at least one ack or push")
	requireError(t, request(t, nc, "comb.txn", `{"acks":[{"queue":"nope","offset":0,"lease":"l-1-a"}]}`), 404, `acks[0]: queue "nope": not found`)
}

// TestTxnDelayedPushWakesWhenReady: a transaction's message with its own
// delay and headers is held back as a push's, and wakes the pop waiting
// for it once ready, not before.
func TestTxnDelayedPushWakesWhenReady(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	call(t, nc, "comb.configure.tdelay", ``, nil)
	got := make(chan map[string]any, 1)
	go func() {
		var rep struct {
			Messages []map[string]any `json:"messages"`
		}
		m, err := nc.Request("comb.pop.tdelay", []byte(`{"wait_ms":8000}`), reqTimeout)
		if err == nil {
			err = json.Unmarshal(m.Data, &rep)
		}
		if err != nil || len(rep.Messages) != 1 {
			t.Errorf("pop: %v %v", err, rep.Messages)
			got <- nil
			return
		}
		got <- rep.Messages[0]
	}()
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 })
	start := time.Now()
	m := request(t, nc, "comb.txn", `{"push":[{"queue":"tdelay","messages":[{"data":"later","delay_ms":400,"headers":{"trace":"t-1"}}]}]}`)
	require.Empty(t, m.Header.Get("Nats-Service-Error-Code"), "%s", m.Data)
	select {
	case msg := <-got:
		require.NotNil(t, msg)
		require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "held back by its delay")
		require.Less(t, time.Since(start), 5*time.Second, "woken, not found by a retry")
		require.Equal(t, "later", msg["data"])
		require.Equal(t, map[string]any{"trace": []any{"t-1"}}, msg["headers"])
	case <-time.After(reqTimeout):
		t.Fatal("the waiting pop was not woken")
	}
}

// TestTxnRetryHoldWakesWhenItEnds: a transaction's retry ack with a delay
// holds the partition back, as an ack's does, and wakes the group's
// waiting pop when the hold ends.
func TestTxnRetryHoldWakesWhenItEnds(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	push(t, nc, "thold", `{"messages":[{"data":"again"}]}`)
	ms := pop(t, nc, "thold", `{"group":"g"}`)
	require.Len(t, ms, 1)
	m := request(t, nc, "comb.txn", fmt.Sprintf(`{"acks":[{"queue":"thold","group":"g","offset":%d,"lease":%q,"status":"retry","delay_ms":400}],
		"push":[{"queue":"thold-log","messages":[{"data":"retried"}]}]}`, ms[0].Offset, ms[0].Lease))
	require.Empty(t, m.Header.Get("Nats-Service-Error-Code"), "%s", m.Data)
	start := time.Now()
	poll := longPoll(t, env, "thold", "g")
	got := recv(t, poll, "the pop of the held partition")
	require.Len(t, got, 1)
	require.Equal(t, `"again"`, string(got[0].Data))
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "held back by the retry delay")
	require.Less(t, time.Since(start), 5*time.Second, "woken, not found by a retry")
}
