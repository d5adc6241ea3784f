package bridge_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/internal/combtest"
)

// Parked long polls on many queues cost one statement a retry interval
// together, not a pop each: the safety check asks for all of them at once,
// a group it finds empty is known to be so, and a poll whose deadline comes
// is answered without another pop. A lease that expires with nobody to
// say so (no push, no ack) still reaches a waiting pop, through the check.
func TestParkedPollsShareOneCheck(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: interval}})
	nc := env.NC

	// 30 queues whose one group has consumed everything.
	const queues = 30
	for i := range queues {
		q := fmt.Sprintf("idle.q%02d", i)
		push(t, nc, q, `{"messages":[{"data":1}]}`)
		require.Len(t, pop(t, nc, q, `{"auto_ack":true}`), 1)
	}
	// A long poll on each, and three more that end within the window.
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	for i := range queues {
		require.NoError(t, nc.PublishRequest(fmt.Sprintf("comb.pop.idle.q%02d", i), inbox, []byte(`{"auto_ack":true,"wait_ms":30000}`)))
	}
	for i := range 3 {
		require.NoError(t, nc.PublishRequest(fmt.Sprintf("comb.pop.idle.q%02d", i), inbox, []byte(`{"auto_ack":true,"wait_ms":1500}`)))
	}
	require.Eventually(t, func() bool { return env.Bridge.Waiting() == queues+3 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(2 * interval) // a check has marked every group

	before := env.Bridge.Stats()
	time.Sleep(2 * time.Second)
	after := env.Bridge.Stats()
	require.Zero(t, after.PopStoreCalls-before.PopStoreCalls, "no waiting pop, nor one whose deadline came, asked PostgreSQL")
	checks := after.WaiterChecks - before.WaiterChecks
	require.GreaterOrEqual(t, checks, int64(5), "one check an interval")
	require.LessOrEqual(t, checks, int64(12), "one check an interval, for all %d waiters", queues+3)
	for range 3 {
		m, err := replies.NextMsg(5 * time.Second)
		require.NoError(t, err)
		require.JSONEq(t, `{"messages":[]}`, string(m.Data), "the short polls ended empty")
	}
	require.Equal(t, queues, env.Bridge.Waiting())

	// A lease that ends with no wake-up: the check finds it.
	push(t, nc, "lease", `{"messages":[{"data":7}]}`)
	require.Len(t, pop(t, nc, "lease", `{"lease_ms":300}`), 1)
	start := time.Now()
	m := request(t, nc, "comb.pop.lease", `{"wait_ms":10000}`)
	var rep struct {
		Messages []json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &rep))
	require.Len(t, rep.Messages, 1, "the expired lease's message, before the poll's deadline")
	require.Less(t, time.Since(start), 5*time.Second)

	// A push still wakes the waiters at once.
	push(t, nc, "idle.q07", `{"messages":[{"data":2}]}`)
	got, err := replies.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.Contains(t, string(got.Data), `"data":2`)
}

// Pushes of one partition sent back to back, without waiting for their
// replies, are stored in the order they were sent: they all go to the one
// push worker of their partition.
func TestPipelinedPushesKeepOrder(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	const n = 300
	for i := range n {
		p := fmt.Sprint("p", i%3) // three partitions, each its own order
		require.NoError(t, nc.PublishRequest("comb.push.order", inbox, fmt.Appendf(nil, `{"messages":[{"partition":%q,"data":%d}]}`, p, i)))
	}
	for range n {
		_, err := replies.NextMsg(10 * time.Second)
		require.NoError(t, err)
	}
	for p := range 3 {
		ms := pop(t, nc, "order", fmt.Sprintf(`{"partition":"p%d","max":1000,"auto_ack":true}`, p))
		require.Len(t, ms, n/3)
		for k, m := range ms {
			require.JSONEq(t, fmt.Sprint(p+3*k), string(m.Data), "partition p%d offset %d", p, m.Offset)
		}
	}
}

// Pops that do not wait use what the bridge knows of their group too: one
// that reads every cursor learns the other ready partitions, and the
// next pops take those by key. On 2,000 partitions with messages in 100,
// draining them one pop at a time reads every cursor a few times, not on
// every pop, and gets every message exactly once. A lease that expires
// meanwhile is found: a pop that does not wait reads every cursor before
// it answers that nothing is ready.
func TestPopsWithoutWaitUseCandidates(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "wide", messagesBody(2000, func(i int) (string, int) { return fmt.Sprintf("p%04d", i), i }))
	// The group starts past all of that; then 100 partitions get one
	// message each, and one more is leased briefly and abandoned.
	require.Empty(t, pop(t, nc, "wide", `{"from":"new","auto_ack":true}`))
	push(t, nc, "wide", messagesBody(101, func(i int) (string, int) { return fmt.Sprintf("p%04d", i*19), i * 19 }))
	abandoned := pop(t, nc, "wide", `{"partition":"p1900","lease_ms":300}`)
	require.Len(t, abandoned, 1)

	before := env.Bridge.Stats()
	seen := map[string]bool{}
	for range 100 {
		ms := pop(t, nc, "wide", `{"max":1,"auto_ack":true}`)
		require.Len(t, ms, 1)
		require.False(t, seen[string(ms[0].Data)], "delivered twice: %s", ms[0].Data)
		seen[string(ms[0].Data)] = true
	}
	scans := env.Bridge.Stats().PopScans - before.PopScans
	require.LessOrEqual(t, scans, int64(10), "pops took the ready partitions by key, not each reading all 2,000 cursors")
	require.False(t, seen["1900"], "leased to another")

	time.Sleep(400 * time.Millisecond) // the abandoned lease ends
	ms := pop(t, nc, "wide", `{"max":1,"auto_ack":true}`)
	require.Len(t, ms, 1, "the expired lease's message")
	require.Equal(t, "1900", string(ms[0].Data))
	require.Empty(t, pop(t, nc, "wide", `{"max":1,"auto_ack":true}`))
}

// A pop with auto-ack that takes only part of a partition (its max ran
// out) leaves the rest ready with no lease and no ack to wake anyone: the
// bridge must not take the group for empty. Long polls shorter than the
// retry interval read such a queue to the end, as the fault tests'
// read-back does.
func TestAutoAckLeftoversStayCandidates(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "left", messagesBody(3000, func(i int) (string, int) { return fmt.Sprint("p", i%4), i }))
	for _, shape := range []string{`"partitions":8,"max":1000`, `"max":300`} {
		group := strings.NewReplacer(`"`, "", ":", "", ",", "-").Replace(shape)
		got, empty := 0, 0
		for tries := 0; empty < 2; tries++ {
			require.Less(t, tries, 100)
			ms := pop(t, nc, "left", fmt.Sprintf(`{"group":%q,%s,"auto_ack":true,"wait_ms":200}`, group, shape))
			if len(ms) == 0 {
				empty++
				continue
			}
			empty = 0
			got += len(ms)
		}
		require.Equal(t, 3000, got, "pops of %s read everything before two empty polls", shape)
	}
}

// A pop of several partitions that claimed one and leased nothing of it
// (its max ran out on the partition before) wakes its group's pops for
// it, on every bridge: a concurrent pop skipped it as locked and may have
// forgotten it, and no ack will come for a partition nobody leased.
func TestPopWakesForWhatItKept(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "kept", messagesBody(10, func(i int) (string, int) { return fmt.Sprint("p", i%2), i }))
	wakes, err := nc.SubscribeSync("_COMB.comb.wake.kept")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	ms := pop(t, nc, "kept", `{"group":"g","partitions":2,"max":5}`)
	require.Len(t, ms, 5)
	other := map[string]string{"p0": "p1", "p1": "p0"}[ms[0].Partition]
	var bodies []string
	for {
		m, err := wakes.NextMsg(2 * time.Second)
		require.NoError(t, err, "no wake-up for %s among %q", other, bodies)
		bodies = append(bodies, string(m.Data))
		if strings.Contains(string(m.Data), "g\t"+other) {
			break
		}
	}
}
