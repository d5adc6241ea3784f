package bridge_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
)

// popAcking pops with acks in the body and returns the messages and the
// acks' results.
func popAcking(t testing.TB, env *combtest.Env, queue, body string) ([]msgOut, []ackResult) {
	t.Helper()
	var rep struct {
		Messages []msgOut    `json:"messages"`
		Acks     []ackResult `json:"acks"`
	}
	call(t, env.NC, "comb.pop."+queue, body, &rep)
	require.NotNil(t, rep.Messages, "messages must be [], not null")
	return rep.Messages, rep.Acks
}

// A pop that carries acks settles them first, answers their results in
// order, and then pops as if they had been sent alone: a completed lease
// frees its partition for the next messages, which the same request gets.
func TestPopCarriesAcks(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "jobs", `{"messages":[{"partition":"p","data":1},{"partition":"p","data":2},{"partition":"p","data":3}]}`)

	first := pop(t, nc, "jobs", `{"group":"g","max":1}`)
	require.Len(t, first, 1)
	require.Equal(t, int64(0), first[0].Offset)
	// While offset 0 is leased, the group gets nothing more of p.
	require.Empty(t, pop(t, nc, "jobs", `{"group":"g","max":1}`))

	body := fmt.Sprintf(`{"group":"g","max":1,"acks":[{"partition":"p","offset":0,"lease":%q},
		{"partition":"p","offset":0,"lease":"l-1-0000000000000000"}]}`, first[0].Lease)
	msgs, acks := popAcking(t, env, "jobs", body)
	require.Len(t, acks, 2, "one result per ack, in order")
	require.True(t, acks[0].OK)
	require.False(t, acks[1].OK, "a wrong lease settles nothing and says so, and the pop goes on")
	require.NotEmpty(t, acks[1].Error)
	require.Len(t, msgs, 1, "the ack freed p before the pop looked")
	require.Equal(t, int64(1), msgs[0].Offset)
	require.Equal(t, 1, msgs[0].Attempt)

	// Acked with a retry: offset 1 comes back in the same request, on its
	// next attempt.
	msgs, acks = popAcking(t, env, "jobs", fmt.Sprintf(
		`{"group":"g","max":1,"acks":[{"partition":"p","offset":1,"lease":%q,"status":"retry"}]}`, msgs[0].Lease))
	require.Equal(t, []ackResult{{OK: true}}, acks)
	require.Len(t, msgs, 1)
	require.Equal(t, int64(1), msgs[0].Offset)

	msgs, acks = popAcking(t, env, "jobs", fmt.Sprintf(
		`{"group":"g","max":10,"acks":[{"partition":"p","offset":1,"lease":%q}]}`, msgs[0].Lease))
	require.Equal(t, []ackResult{{OK: true}}, acks)
	require.Len(t, msgs, 1)
	require.Equal(t, int64(2), msgs[0].Offset)

	// A long poll that carries the last ack waits for a push after it.
	pushed := make(chan []pushResult, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		pushed <- push(t, nc, "jobs", `{"messages":[{"partition":"p","data":4}]}`)
	}()
	msgs, acks = popAcking(t, env, "jobs", fmt.Sprintf(
		`{"group":"g","max":10,"wait_ms":20000,"acks":[{"partition":"p","offset":2,"lease":%q}]}`, msgs[0].Lease))
	require.Len(t, <-pushed, 1)
	require.Equal(t, []ackResult{{OK: true}}, acks)
	require.Len(t, msgs, 1)
	require.Equal(t, int64(3), msgs[0].Offset)
	last := msgs[0]

	// A pop without acks has no acks member; one with its acks settled
	// and nothing to deliver answers [] and the results.
	m := request(t, nc, "comb.pop.jobs", `{"group":"g"}`)
	require.Equal(t, `{"messages":[]}`, string(m.Data))
	msgs, acks = popAcking(t, env, "jobs", fmt.Sprintf(
		`{"group":"g","acks":[{"partition":"p","offset":%d,"lease":%q}]}`, last.Offset, last.Lease))
	require.Equal(t, []ackResult{{OK: true}}, acks)
	require.Empty(t, msgs)
	require.Empty(t, pop(t, nc, "jobs", `{"group":"g","max":10}`), "everything was acked")
}

// Acks a pop cannot carry are refused whole, before anything is settled
// or leased.
func TestPopCarryingBadAcks(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "bad", `{"messages":[{"data":1},{"data":2}]}`)
	leased := pop(t, nc, "bad", `{"max":1}`)
	require.Len(t, leased, 1)
	good := fmt.Sprintf(`{"offset":0,"lease":%q}`, leased[0].Lease)

	for _, c := range []struct{ subject, body, want string }{
		{"comb.pop.bad", `{"acks":[` + good + `,{"lease":"l-1-0000000000000000"}]}`, "acks[1].offset: required"},
		{"comb.pop.bad", `{"acks":[` + good + `,{"offset":"x","lease":"l"}]}`, "acks[1]"},
		{"comb.pop.bad", `{"acks":[{"offset":0,"lease":"l-1-0000000000000000","status":"done"}]}`, "acks[0].status"},
		{"comb.pop.bad", `{"acks":{}}`, "acks"},
		{"comb.npop.bad", `{"acks":[` + good + `]}`, "acks: not allowed in a namespace pop"},
	} {
		requireError(t, request(t, nc, c.subject, c.body), 400, c.want)
	}
	many := `{"acks":[` + strings.Repeat(`{"offset":0,"lease":"l-1-0000000000000000"},`, 10000) + good + `]}`
	requireError(t, request(t, nc, "comb.pop.bad", many), 413, "at most 10000")

	// Nothing was settled, and nothing more leased: offset 0 is still
	// held, and its lease still acks.
	require.Empty(t, pop(t, nc, "bad", `{"max":10}`))
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "bad", `{"acks":[`+good+`]}`))
	require.Len(t, pop(t, nc, "bad", `{"max":10}`), 1)
}

// A long poll that carried acks and waits when the bridge stops is
// answered with their results.
func TestStopAnswersLongPollCarryingAcks(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	push(t, nc, "s", `{"messages":[{"data":1}]}`)
	leased := pop(t, nc, "s", ``)
	require.Len(t, leased, 1)
	got := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request("comb.pop.s", []byte(fmt.Sprintf(`{"wait_ms":60000,"acks":[{"offset":0,"lease":%q}]}`,
			leased[0].Lease)), reqTimeout)
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 })
	env.Bridge.Stop()
	m := <-got
	require.NotNil(t, m)
	require.Equal(t, `{"messages":[],"acks":[{"ok":true}]}`, string(m.Data))
}

// Acks whose results leave no room in a reply under the server's
// max_payload are answered alone: the pop leases nothing it could not
// send.
func TestPopCarryingAcksThatFillTheReply(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{NATS: embeddednats.Config{MaxPayload: 4096}})
	nc := env.NC
	push(t, nc, "full", `{"messages":[{"data":1},{"data":2}]}`)
	// 60 acks under a wrong lease: 60 results with their error, over 3 KiB.
	body := `{"acks":[` + strings.TrimSuffix(strings.Repeat(`{"offset":0,"lease":"l-1-0000000000000000"},`, 60), ",") + `]}`
	msgs, acks := popAcking(t, env, "full", body)
	require.Len(t, acks, 60)
	require.False(t, acks[0].OK)
	require.Empty(t, msgs)
	require.Len(t, pop(t, nc, "full", `{"max":10}`), 2, "nothing was leased")
}
