package bridge_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
)

// nsMsg is a message of a namespace pop's reply: a pop's, and its queue.
type nsMsg struct {
	Queue string `json:"queue"`
	msgOut
}

func npop(t testing.TB, nc *nats.Conn, namespace, body string) []nsMsg {
	t.Helper()
	var rep struct {
		Messages []nsMsg `json:"messages"`
	}
	call(t, nc, "comb.npop."+namespace, body, &rep)
	require.NotNil(t, rep.Messages, "messages must be [], not null")
	return rep.Messages
}

// TestNamespacePop: comb.npop.<namespace> leases from the queues under it,
// each message names its queue, and ack and renew go to that queue.
func TestNamespacePop(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "billing.invoices", `{"messages":[{"partition":"eu","data":1},{"partition":"eu","data":2}]}`)
	push(t, nc, "billing.refunds", `{"messages":[{"data":3}]}`)
	push(t, nc, "billing", `{"messages":[{"data":"not under billing."}]}`)
	push(t, nc, "billingx.a", `{"messages":[{"data":"nor this"}]}`)

	msgs := npop(t, nc, "billing", `{"group":"g","max":10}`)
	require.Len(t, msgs, 3)
	count := map[string]int{}
	for _, m := range msgs {
		count[m.Queue]++
	}
	require.Equal(t, map[string]int{"billing.invoices": 2, "billing.refunds": 1}, count)

	for _, m := range msgs {
		var rep struct {
			Results []struct {
				Lease     string    `json:"lease"`
				OK        bool      `json:"ok"`
				ExpiresAt time.Time `json:"expires_at"`
			} `json:"results"`
		}
		call(t, nc, "comb.renew."+m.Queue, fmt.Sprintf(`{"leases":[%q],"lease_ms":60000}`, m.Lease), &rep)
		require.True(t, rep.Results[0].OK, "renew on %s", m.Queue)
		require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, m.Queue, ackBody("g", m.msgOut, "completed")))
	}
	require.Empty(t, npop(t, nc, "billing", `{"group":"g","max":10}`), "all settled")
	// The group is per queue: billing's own queue was not touched, and
	// other groups still have everything.
	require.Len(t, pop(t, nc, "billing", `{"group":"g"}`), 1)
	require.Len(t, npop(t, nc, "billing", `{"max":10,"auto_ack":true}`), 3)

	// A namespace without queues is an empty pop, as an empty queue is.
	require.Empty(t, npop(t, nc, "nothing.here", ``))
}

// TestNamespacePopSpreads: two queues with a backlog are both served within
// two pops of one message, over the wire.
func TestNamespacePopSpreads(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	for _, q := range []string{"sp.a", "sp.b"} {
		push(t, nc, q, `{"messages":[{"data":1},{"data":2},{"data":3}]}`)
	}
	seen := map[string][]int64{}
	for range 4 {
		m := npop(t, nc, "sp", `{"max":1,"auto_ack":true}`)
		require.Len(t, m, 1)
		seen[m[0].Queue] = append(seen[m[0].Queue], m[0].Offset)
	}
	require.Equal(t, map[string][]int64{"sp.a": {0, 1}, "sp.b": {0, 1}}, seen)
}

// TestNamespacePopErrors: bad namespaces and bodies are 400s naming what is
// wrong, and lease nothing.
func TestNamespacePopErrors(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "bad.q", `{"messages":[{"partition":"eu","data":1}]}`)
	for _, c := range []struct{ subject, body, want string }{
		{"comb.npop.bad", `{"partition":"eu"}`, "partition: not allowed in a namespace pop"},
		{"comb.npop.bad", `{"max":0}`, "max: 0 is out of range"},
		{"comb.npop.bad", `{"namespace":true}`, `unknown field "namespace"`},
		{"comb.npop.bad", `{"wait_ms":-1}`, "wait_ms"},
		{"comb.npop.bad", "{\"group\":\"g\xff\"}", "group: invalid UTF-8"},
		{"comb.npop.bad.>", ``, "queue name"},
		{"comb.npop.bad.*", ``, "queue name"},
		{"comb.npop.bad.a$b", ``, "queue name"},
		{"comb.pop.bad.>", ``, "queue name"},
	} {
		requireError(t, request(t, nc, c.subject, c.body), 400, c.want)
	}
	// Nothing was leased by the refused pops.
	require.Len(t, pop(t, nc, "bad.q", ``), 1)
}

// TestNamespacePopWokenByPushToNewQueue: a long-polling namespace pop is
// answered by a push to a queue of its namespace, on any bridge, even a
// queue created after it began to wait; with no safety-net retries, only
// the wake-up can answer it early.
func TestNamespacePopWokenByPushToNewQueue(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	second := combtest.AddBridge(t, env, bridge.Config{RetryInterval: time.Hour})

	// Park pops, each in its own group, until both bridges hold some.
	var wg sync.WaitGroup
	results := make(chan []nsMsg, 64)
	for n := 0; n < 32 && (env.Bridge.Waiting() == 0 || second.Waiting() == 0); n++ {
		wg.Add(1)
		go func(group string) {
			defer wg.Done()
			var rep struct {
				Messages []nsMsg `json:"messages"`
			}
			m, err := nc.Request("comb.npop.wk", []byte(`{"wait_ms":8000,"group":"`+group+`"}`), reqTimeout)
			if err == nil {
				err = json.Unmarshal(m.Data, &rep)
			}
			if err != nil {
				t.Error(err)
			}
			results <- rep.Messages
		}("g" + strconv.Itoa(n))
		want := n + 1
		waitFor(t, func() bool { return env.Bridge.Waiting()+second.Waiting() == want })
	}
	require.Positive(t, env.Bridge.Waiting())
	require.Positive(t, second.Waiting())

	start := time.Now()
	push(t, nc, "wk.fresh.deep", `{"messages":[{"data":"hello"}]}`)
	wg.Wait()
	close(results)
	require.Less(t, time.Since(start), 5*time.Second)
	for got := range results {
		require.Len(t, got, 1, "every group's namespace pop got the message")
		require.Equal(t, "wk.fresh.deep", got[0].Queue)
		require.Equal(t, `"hello"`, string(got[0].Data))
	}
	require.Zero(t, env.Bridge.Waiting()+second.Waiting())
}

// TestNamespacePopReplyFitsMaxPayload: the queues of a namespace pop share
// one reply, and what does not fit stays for the next pop: under auto_ack
// every message comes exactly once, none lost to a trimmed reply.
func TestNamespacePopReplyFitsMaxPayload(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{NATS: embeddednats.Config{MaxPayload: 4096}})
	nc := env.NC
	want := map[string]bool{}
	for _, q := range []string{"fit.a", "fit.b", "fit.c"} {
		for i := range 3 {
			push(t, nc, q, fmt.Sprintf(`{"messages":[{"data":"%d%s"}]}`, i, strings.Repeat("x", 600)))
			want[fmt.Sprint(q, "/", i)] = true
		}
	}
	got := map[string]bool{}
	for range 20 {
		msgs := npop(t, nc, "fit", `{"max":100,"auto_ack":true}`)
		if len(msgs) == 0 {
			break
		}
		require.Less(t, len(msgs), 9, "4096 bytes hold fewer than 9 messages of 600")
		for _, m := range msgs {
			k := fmt.Sprint(m.Queue, "/", m.Offset)
			require.False(t, got[k], "%s twice", k)
			got[k] = true
		}
	}
	require.Equal(t, want, got)
}
