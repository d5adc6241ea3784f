package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/internal/combtest"
)

// TestRetryDelayThroughNATS: a failed ack on a queue with retry_delay_ms
// holds the message back; a long poll waiting for it is woken when the
// delay has passed (the retry interval is an hour: only that wake-up can
// end it with the message). Bad delay_ms and error fields are 400s that
// settle nothing, and the error text of the ack that dead-letters the
// message is listed with it.
func TestRetryDelayThroughNATS(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	var cfg map[string]any
	call(t, nc, "comb.configure.rd", `{"max_attempts":2,"retry_delay_ms":300,"retry_backoff_pct":200,"retry_delay_max_ms":1000}`, &cfg)
	require.Equal(t, map[string]any{"retry_delay_ms": 300.0, "retry_backoff_pct": 200.0, "retry_delay_max_ms": 1000.0},
		map[string]any{"retry_delay_ms": cfg["retry_delay_ms"], "retry_backoff_pct": cfg["retry_backoff_pct"], "retry_delay_max_ms": cfg["retry_delay_max_ms"]})
	requireError(t, request(t, nc, "comb.configure.rd", `{"retry_backoff_pct":50}`), 400, "retry_backoff_pct: 50 is out of range 100..1000")
	push(t, nc, "rd", `{"messages":[{"data":"pay"}]}`)

	ms := pop(t, nc, "rd", `{}`)
	require.Len(t, ms, 1)
	began := time.Now()
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "rd", fmt.Sprintf(
		`{"acks":[{"offset":0,"lease":%q,"status":"failed","error":"timed out"}]}`, ms[0].Lease)))
	ms = pop(t, nc, "rd", `{"wait_ms":8000}`)
	require.Len(t, ms, 1, "the hold's end woke the long poll")
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "not before the delay")
	// The poll's last try at its deadline would find the message too.
	require.Less(t, time.Since(began), 5*time.Second, "woken before its deadline")
	require.Equal(t, 2, ms[0].Attempt)
	require.Zero(t, env.Bridge.Waiting())

	// Misplaced or out-of-range fields refuse the whole request.
	lease := ms[0].Lease
	for body, want := range map[string]string{
		`{"acks":[{"offset":0,"lease":%q,"delay_ms":5}]}`:                           "acks[0].delay_ms: only with status retry or failed",
		`{"acks":[{"offset":0,"lease":%q,"status":"failed","delay_ms":-5}]}`:        "acks[0].delay_ms: -5 is out of range 0..604800000",
		`{"acks":[{"offset":0,"lease":%q,"status":"retry","error":"x"}]}`:           "acks[0].error: only with status failed or dead",
		`{"acks":[{"offset":0,"lease":%q,"status":"failed","error":"line\nline"}]}`: "acks[0].error: control character",
	} {
		requireError(t, request(t, nc, "comb.ack.rd", fmt.Sprintf(body, lease)), 400, want)
	}

	// The last attempt fails: dead-lettered with this ack's error text.
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "rd", fmt.Sprintf(
		`{"acks":[{"offset":0,"lease":%q,"status":"failed","error":"card declined"}]}`, lease)))
	var dlq struct {
		DeadLetters []deadLetter `json:"dead_letters"`
		Next        string       `json:"next"`
	}
	call(t, nc, "comb.dlq.rd", ``, &dlq)
	require.Len(t, dlq.DeadLetters, 1)
	require.Equal(t, "failed", dlq.DeadLetters[0].Reason)
	require.Equal(t, "card declined", dlq.DeadLetters[0].Error)
	require.Equal(t, 2, dlq.DeadLetters[0].Attempts)
}
