package bridge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

// TestWakeNamespaces: a namespace pop waits under its namespace and a dot,
// and a wake-up of a queue retries the namespace pops of every prefix of
// its name that ends at a dot: a.b.c wakes a and a.b, never a.b.c itself
// (a queue is not under its own name), a.bc or another tenant's a.
func TestWakeNamespaces(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	park := func(tenant, ns, group string, max int) *popJob {
		job := &popJob{call: testCall(), ns: true, deadline: time.Now().Add(time.Hour),
			req: domain.PopParams{Queue: domain.QueueRef{Tenant: tenant, Name: ns + "."}, Group: group, Max: max}}
		seq, k := p.attach(job.req.Queue, job.req.Group, false)
		require.False(t, k.valid)
		require.True(t, p.park(job, seq, time.Time{}))
		require.Equal(t, domain.QueueRef{Tenant: tenant, Name: ns}, job.namespace())
		return job
	}
	woken := func() map[*popJob]bool {
		out := map[*popJob]bool{}
		for {
			select {
			case job := <-p.ch:
				out[job] = true
			default:
				return out
			}
		}
	}
	a := park("", "a", "g", 0)
	ab := park("", "a.b", "g", 0)
	abc := park("", "a.b.c", "g", 0)
	other := park("T", "a", "g", 0)

	for _, q := range []string{"a", "ab.c", "b.a.b"} {
		p.wake(domain.Global(q), nil, 0)
		require.Empty(t, woken(), "a wake-up of %s", q)
	}
	p.wake(domain.Global("a.bc"), nil, 0)
	require.Equal(t, map[*popJob]bool{a: true}, woken(), "a.bc is under a, not under a.b")
	a = park("", "a", "g", 0)
	p.wake(domain.Global("a.b.c"), []wakeTarget{{"", "p"}}, 0)
	require.Equal(t, map[*popJob]bool{a: true, ab: true}, woken())
	require.Equal(t, 2, p.waiting(), "a.b.c's and tenant T's wait on")
	p.wake(domain.QueueRef{Tenant: "T", Name: "a.x"}, nil, 0)
	require.Equal(t, map[*popJob]bool{other: true}, woken())
	p.wake(domain.Global("a.b.c.d"), nil, 0)
	require.Equal(t, map[*popJob]bool{abc: true}, woken())
	require.Zero(t, p.waiting())

	// A count bounds the waiters per group, as for a queue's.
	for range 3 {
		park("", "n", "g", 100)
		park("", "n", "h", 100)
	}
	p.wake(domain.Global("n.q"), nil, 150)
	require.Len(t, woken(), 4, "two of max 100 per group cover 150 messages")
	p.wake(domain.Global("n.q"), nil, 0)
	require.Len(t, woken(), 2, "no count: every waiter")

	// An ack's wake-up names its group: only that group's waiters.
	g, h := park("", "n", "g", 0), park("", "n", "h", 0)
	p.wake(domain.Global("n.q"), []wakeTarget{{"h", "p"}}, 0)
	require.Equal(t, map[*popJob]bool{h: true}, woken())
	p.wake(domain.Global("n.q"), []wakeTarget{{"h", "p"}, {"", "p2"}}, 0)
	require.Equal(t, map[*popJob]bool{g: true}, woken(), "a target for every group wakes every group")

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.queues, "woken pops let go of their keys")
}
