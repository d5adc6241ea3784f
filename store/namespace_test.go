package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// popNS pops the namespace ns of the global tenant.
func popNS(t *testing.T, st *store.Store, ns string, req domain.PopParams) []domain.Message {
	t.Helper()
	req.Queue = domain.Global(ns)
	ms, err := st.PopNamespace(ctxT(t), req)
	require.NoError(t, err)
	return ms
}

// byQueue counts messages per queue.
func byQueue(ms []domain.Message) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		out[m.Queue]++
	}
	return out
}

// TestPopNamespaceDrawsFromItsQueuesOnly: a namespace pop leases from every
// queue under the prefix, nested ones too, names each message's queue, and
// keeps each partition's order; the namespace's own queue and queues that
// only share the prefix's letters are not under it.
func TestPopNamespaceDrawsFromItsQueuesOnly(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pushN(t, st, "billing.invoices", "p", 0, 3)
	pushN(t, st, "billing.refunds", "p", 0, 2)
	pushN(t, st, "billing.eu.tax", "p", 0, 1)
	pushN(t, st, "billing", "p", 0, 1)    // the namespace's name, not under it
	pushN(t, st, "billingx.a", "p", 0, 1) // shares the letters, not the dot
	pushN(t, st, "other.billing.a", "p", 0, 1)

	ms := popNS(t, st, "billing", domain.PopParams{Max: 100})
	require.Equal(t, map[string]int{"billing.invoices": 3, "billing.refunds": 2, "billing.eu.tax": 1}, byQueue(ms))
	next := map[string]int64{}
	for _, m := range ms {
		require.Equal(t, next[m.Queue], m.Offset, "%s: partition order", m.Queue)
		require.Equal(t, fmt.Sprint(m.Offset), string(m.Data))
		require.NotEmpty(t, m.Lease)
		require.Equal(t, 1, m.Attempt)
		next[m.Queue]++
	}
	require.Empty(t, popNS(t, st, "billing", domain.PopParams{Max: 100}), "every partition is leased")

	// A pop of one queue names none.
	single, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global("billing"), Max: 10})
	require.NoError(t, err)
	require.Len(t, single, 1)
	require.Empty(t, single[0].Queue)

	// Nested namespaces.
	pushN(t, st, "billing.eu.vat", "p", 0, 1)
	require.Equal(t, map[string]int{"billing.eu.vat": 1}, byQueue(popNS(t, st, "billing.eu", domain.PopParams{})))
}

// TestPopNamespaceUnderscoreIsNoWildcard: '_' is a queue-name character, not
// LIKE's any-character.
func TestPopNamespaceUnderscoreIsNoWildcard(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pushN(t, st, "a_b.q", "p", 0, 1)
	pushN(t, st, "axb.q", "p", 0, 1)
	pushN(t, st, "a_bc.q", "p", 0, 1)
	require.Equal(t, map[string]int{"a_b.q": 1}, byQueue(popNS(t, st, "a_b", domain.PopParams{Max: 10})))
	require.Empty(t, popNS(t, st, "a_", domain.PopParams{Max: 10}))
}

// TestPopNamespaceEmpty: a namespace without queues, or without messages,
// is an empty pop, not an error.
func TestPopNamespaceEmpty(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	require.Empty(t, popNS(t, st, "nothing", domain.PopParams{}))
	_, err := st.Configure(ctxT(t), domain.Global("nothing.here"), domain.ConfigPatch{})
	require.NoError(t, err)
	require.Empty(t, popNS(t, st, "nothing", domain.PopParams{}))
	_, err = st.PopNamespace(ctxT(t), domain.PopParams{Queue: domain.Global("nothing"), Partition: "p"})
	require.ErrorIs(t, err, domain.ErrInvalid)
}

// TestPopNamespaceSpreadsOverQueues: with a backlog in two queues, pops of
// one message alternate between them: the queue served last goes to the
// back, whichever queue the first pop took.
func TestPopNamespaceSpreadsOverQueues(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pushN(t, st, "ns.a", "p", 0, 6)
	pushN(t, st, "ns.b", "p", 0, 6)

	// Auto-ack leaves no lease behind, so both queues stay ready and only
	// the order of service decides.
	var order []string
	offsets := map[string][]int64{}
	for range 6 {
		ms := popNS(t, st, "ns", domain.PopParams{Max: 1, AutoAck: true})
		require.Len(t, ms, 1)
		order = append(order, ms[0].Queue)
		offsets[ms[0].Queue] = append(offsets[ms[0].Queue], ms[0].Offset)
	}
	for i := 1; i < len(order); i++ {
		require.NotEqual(t, order[i-1], order[i], "pops alternate: %v", order)
	}
	require.Equal(t, []int64{0, 1, 2}, offsets["ns.a"], "order within a partition")
	require.Equal(t, []int64{0, 1, 2}, offsets["ns.b"])

	// With leases, over several partitions per queue: the next pop goes to
	// the other queue although the first still has ready partitions.
	for _, q := range []string{"lz.a", "lz.b"} {
		for p := range 3 {
			pushN(t, st, q, fmt.Sprint("p", p), 0, 2)
		}
	}
	first := popNS(t, st, "lz", domain.PopParams{Max: 2})
	second := popNS(t, st, "lz", domain.PopParams{Max: 2})
	require.Len(t, first, 2)
	require.Len(t, second, 2)
	require.NotEqual(t, first[0].Queue, second[0].Queue, "both queues are served within two pops")

	// A large max fills from the next queue once the first has no more.
	pushN(t, st, "fill.a", "p", 0, 2)
	pushN(t, st, "fill.b", "p", 0, 2)
	require.Equal(t, map[string]int{"fill.a": 2, "fill.b": 1}, byQueue(popNS(t, st, "fill", domain.PopParams{Max: 3})))
}

// TestPopNamespaceAckAndRenewOnTheMessagesQueue: what a namespace pop leased
// is renewed and settled on each message's own queue, and only there.
func TestPopNamespaceAckAndRenewOnTheMessagesQueue(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	pushN(t, st, "shop.orders", "eu", 0, 2)
	pushN(t, st, "shop.returns", "eu", 0, 1)
	ms := popNS(t, st, "shop", domain.PopParams{Group: "g", Max: 10})
	require.Equal(t, map[string]int{"shop.orders": 2, "shop.returns": 1}, byQueue(ms))

	for _, m := range ms {
		res, err := st.Renew(ctx, domain.RenewParams{Queue: domain.Global(m.Queue), Leases: []string{m.Lease}, LeaseMS: 60000})
		require.NoError(t, err)
		require.True(t, res[0].OK, "renew %s on %s", m.Lease, m.Queue)
	}
	last := ms[len(ms)-1]
	other := "shop.orders"
	if last.Queue == other {
		other = "shop.returns"
	}
	require.False(t, ack(t, st, other, "g", domain.Ack{Partition: last.Partition, Offset: last.Offset, Lease: last.Lease})[0].OK,
		"another queue's ack does not settle it")
	for _, m := range ms {
		require.True(t, ack(t, st, m.Queue, "g", domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})[0].OK)
	}
	require.Empty(t, popNS(t, st, "shop", domain.PopParams{Group: "g", Max: 10}), "all settled")

	// The group is each queue's own: the default group still has it all.
	require.Len(t, popNS(t, st, "shop", domain.PopParams{Max: 10}), 3)
}

// TestPopNamespaceUsesEachQueuesSettings: each queue's pop waits out its own
// delay_ms and leases for its own lease_ms.
func TestPopNamespaceUsesEachQueuesSettings(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	_, err := st.Configure(ctx, domain.Global("cfg.later"), domain.ConfigPatch{DelayMS: ptr(int64(3_600_000))})
	require.NoError(t, err)
	_, err = st.Configure(ctx, domain.Global("cfg.short"), domain.ConfigPatch{LeaseMS: ptr(int64(100))})
	require.NoError(t, err)
	pushN(t, st, "cfg.later", "p", 0, 1)
	pushN(t, st, "cfg.short", "p", 0, 1)
	pushN(t, st, "cfg.long", "p", 0, 1)

	ms := popNS(t, st, "cfg", domain.PopParams{Max: 10})
	require.Equal(t, map[string]int{"cfg.short": 1, "cfg.long": 1}, byQueue(ms), "cfg.later's delay holds its message")
	// cfg.short's 100 ms lease expires; cfg.long's 30 s one does not.
	require.Eventually(t, func() bool {
		again := popNS(t, st, "cfg", domain.PopParams{Max: 10})
		if len(again) == 0 {
			return false
		}
		require.Equal(t, map[string]int{"cfg.short": 1}, byQueue(again))
		require.Equal(t, 2, again[0].Attempt)
		return true
	}, 10*time.Second, 50*time.Millisecond)
}

func ptr[T any](v T) *T { return &v }

// TestPopNamespaceMaxBytes: the reply's bound covers every queue's messages
// together. A later queue whose first message does not fit leases nothing:
// it comes whole, first attempt, with the next pop, and under auto-ack it
// is not lost.
func TestPopNamespaceMaxBytes(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	size := func(*domain.Message) int { return 10 }
	for _, auto := range []bool{false, true} {
		ns := fmt.Sprint("mb", auto)
		pushN(t, st, ns+".a", "p", 0, 2)
		pushN(t, st, ns+".b", "p", 0, 2)
		first := popNS(t, st, ns, domain.PopParams{Max: 10, MaxBytes: 25, SizeOf: size, AutoAck: auto})
		require.Len(t, first, 2, "auto-ack %v: 20 of 25 bytes from one queue; the other's 10 do not fit", auto)
		require.Equal(t, first[0].Queue, first[1].Queue)
		rest := popNS(t, st, ns, domain.PopParams{Max: 10, AutoAck: auto})
		require.Len(t, rest, 2, "auto-ack %v", auto)
		require.NotEqual(t, first[0].Queue, rest[0].Queue)
		for i, m := range rest {
			require.Equal(t, int64(i), m.Offset)
			require.Equal(t, 1, m.Attempt, "never delivered before")
		}
	}
}

// TestPopNamespaceIsTheTenants: a tenant's namespace holds its own queues.
func TestPopNamespaceIsTheTenants(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	a, b := domain.QueueRef{Tenant: "A", Name: "billing.x"}, domain.QueueRef{Tenant: "B", Name: "billing.x"}
	for _, q := range []domain.QueueRef{a, b} {
		out := push(t, st, domain.PushParams{Queue: q, Messages: []domain.PushMessage{{Partition: "p", Data: []byte(`"` + q.Tenant + `"`), Encoding: domain.EncodingJSON}}})[0]
		require.NoError(t, out.Err)
	}
	ms, err := st.PopNamespace(ctx, domain.PopParams{Queue: domain.QueueRef{Tenant: "A", Name: "billing"}, Max: 10})
	require.NoError(t, err)
	require.Equal(t, []string{`"A"`}, datas(ms))
	require.Empty(t, popNS(t, st, "billing", domain.PopParams{Max: 10}), "the global tenant has none")
}

// BenchmarkPopNamespace measures what a namespace pop costs over a pop of
// one queue: one listing query, then one Pop per queue it takes messages
// from. Every partition holds 10 messages and each call leases whole
// partitions (1 hour leases, never acked), so "one" reads one queue's
// partition per call (listing + 1 Pop) and "eight" one partition of each
// of 8 queues (listing + 8 Pops); "queue" is store.Pop of one queue.
//
//	go test ./store -run '^$' -bench PopNamespace -benchtime 200x
func BenchmarkPopNamespace(b *testing.B) {
	for _, c := range []struct {
		name string
		max  int
		ns   bool
	}{{"queue", 10, false}, {"one", 10, true}, {"eight", 80, true}} {
		b.Run(c.name, func(b *testing.B) {
			st := newStore(b)
			ctx := context.Background()
			const queues = 8
			for q := range queues {
				ref := domain.Global(fmt.Sprint("bn.q", q))
				if _, err := st.Configure(ctx, ref, domain.ConfigPatch{LeaseMS: ptr(int64(3_600_000))}); err != nil {
					b.Fatal(err)
				}
				for first := 0; first < b.N; first += 10 {
					r := domain.PushParams{Queue: ref}
					for p := first; p < min(first+10, b.N); p++ {
						for range 10 {
							r.Messages = append(r.Messages, domain.PushMessage{Partition: fmt.Sprint("p", p), Data: make([]byte, 256), Encoding: domain.EncodingBinary})
						}
					}
					if outs, err := st.Push(ctx, []domain.PushParams{r}); err != nil || outs[0].Err != nil {
						b.Fatal(err, outs)
					}
				}
			}
			b.ResetTimer()
			got := 0
			for range b.N {
				var ms []domain.Message
				var err error
				if c.ns {
					ms, err = st.PopNamespace(ctx, domain.PopParams{Queue: domain.Global("bn"), Max: c.max})
				} else {
					ms, err = st.Pop(ctx, domain.PopParams{Queue: domain.Global("bn.q0"), Max: c.max})
				}
				if err != nil || len(ms) != c.max {
					b.Fatal(err, len(ms))
				}
				got += len(ms)
			}
			b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
