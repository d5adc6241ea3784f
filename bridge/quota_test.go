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
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/protocol"
)

// requireQuota checks that m is a 429 of a tenant's quota: the micro
// error headers, Comb-Retry-After-Ms, and the same in the body. It returns
// the retry hint.
func requireQuota(t testing.TB, m *nats.Msg, want string) time.Duration {
	t.Helper()
	require.Equal(t, "429", m.Header.Get(micro.ErrorCodeHeader), "reply %s", m.Data)
	require.Contains(t, m.Header.Get(micro.ErrorHeader), want)
	ms, err := strconv.ParseInt(m.Header.Get(protocol.HeaderRetryAfterMS), 10, 64)
	require.NoError(t, err, "%s header", protocol.HeaderRetryAfterMS)
	require.Positive(t, ms)
	var body protocol.ErrorReply
	dec := json.NewDecoder(strings.NewReader(string(m.Data)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body), "error body %s", m.Data)
	require.Equal(t, protocol.ErrorBody{Code: 429, Message: m.Header.Get(micro.ErrorHeader), RetryAfterMS: ms}, body.Error)
	return time.Duration(ms) * time.Millisecond
}

func startQuota(t *testing.T, q bridge.Quota) *combtest.Env {
	return combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{Quotas: bridge.Quotas{Default: q}}})
}

func retained(t *testing.T, env *combtest.Env, queue string) domain.Info {
	t.Helper()
	info, err := env.Store.Info(t.Context(), domain.InfoParams{Queue: domain.Global(queue), Limit: 1000})
	require.NoError(t, err)
	return info
}

func TestQuotaMaxQueues(t *testing.T) {
	t.Parallel()
	env := startQuota(t, bridge.Quota{MaxQueues: 2})
	nc := env.NC
	call(t, nc, "comb.configure.one", `{}`, nil)
	push(t, nc, "two", `{"messages":[{"data":1}]}`)
	requireQuota(t, request(t, nc, "comb.push.three", `{"messages":[{"data":1}]}`), "max_queues is 2")
	requireQuota(t, request(t, nc, "comb.put.three", `1`), "max_queues is 2")
	requireQuota(t, request(t, nc, "comb.configure.three", `{}`), "max_queues is 2")
	requireError(t, request(t, nc, "comb.info.three", `{}`), 404, "not found")
	// The queues it has still take messages and settings.
	push(t, nc, "one", `{"messages":[{"data":1}]}`)
	call(t, nc, "comb.configure.two", `{"max_attempts":3}`, nil)
	// A deleted queue makes room.
	call(t, nc, "comb.delete.one", `{}`, nil)
	push(t, nc, "three", `{"messages":[{"data":1}]}`)
}

// Concurrent creators of different queues on two bridges never make more
// than max_queues: the store counts them under the tenant's lock.
func TestQuotaMaxQueuesConcurrent(t *testing.T) {
	t.Parallel()
	env := startQuota(t, bridge.Quota{MaxQueues: 5})
	combtest.AddBridge(t, env, bridge.Config{Quotas: bridge.Quotas{Default: bridge.Quota{MaxQueues: 5}}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := request(t, env.NC, fmt.Sprintf("comb.put.q%d", i), `1`)
			mu.Lock()
			codes[m.Header.Get(micro.ErrorCodeHeader)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, map[string]int{"": 5, "429": 15}, codes)
	l, err := env.Store.List(t.Context(), domain.ListParams{Tenant: "", Limit: 1000})
	require.NoError(t, err)
	require.Len(t, l.Queues, 5)
}

func TestQuotaMaxBytes(t *testing.T) {
	t.Parallel()
	env := startQuota(t, bridge.Quota{MaxBytes: 1000})
	nc := env.NC
	msg := `"` + strings.Repeat("x", 98) + `"` // 100 bytes as stored
	stored := 0
	for range 15 {
		m := request(t, nc, "comb.put.big", msg)
		if m.Header.Get(micro.ErrorCodeHeader) == "" {
			stored++
			continue
		}
		requireQuota(t, m, "max_bytes is 1000")
	}
	require.Equal(t, 10, stored, "exactly up to the limit")
	require.Equal(t, int64(1000), retained(t, env, "big").Bytes)
	// Another queue of the tenant shares the tenant's bytes.
	requireQuota(t, request(t, nc, "comb.put.other", msg), "max_bytes is 1000")
	// A transaction's pushes count as a push's; its acks alone are no
	// push, and settle over the quota.
	requireQuota(t, request(t, nc, "comb.txn", `{"push":[{"queue":"other","messages":[{"data":`+msg+`}]}]}`), "max_bytes is 1000")
	ms := pop(t, nc, "big", `{"max":1}`)
	m := request(t, nc, "comb.txn", fmt.Sprintf(`{"acks":[{"queue":"big","offset":%d,"lease":%q}]}`, ms[0].Offset, ms[0].Lease))
	require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)

	// Freed bytes (here a delete) count again once the bridge has read the
	// figures anew, within a refresh.
	call(t, nc, "comb.delete.big", `{}`, nil)
	require.Eventually(t, func() bool {
		m := request(t, nc, "comb.put.big", msg)
		return m.Header.Get(micro.ErrorCodeHeader) == ""
	}, 10*time.Second, 50*time.Millisecond)
}

// A bridge that starts on a tenant's existing data counts it.
func TestQuotaMaxBytesCountsWhatIsThere(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	push(t, env.NC, "q", `{"messages":[{"data":"`+strings.Repeat("y", 898)+`"}]}`)
	require.Equal(t, int64(900), retained(t, env, "q").Bytes)
	// The broker's bridge goes; one with the quota takes its place.
	env.Bridge.Stop()
	combtest.AddBridge(t, env, bridge.Config{Quotas: bridge.Quotas{Default: bridge.Quota{MaxBytes: 1000}}})
	requireQuota(t, request(t, env.NC, "comb.put.q", `"`+strings.Repeat("z", 148)+`"`), "the tenant retains 900 bytes")
	m := request(t, env.NC, "comb.put.q", `"`+strings.Repeat("z", 98)+`"`)
	require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "100 more bytes fit: %s", m.Data)
}

func TestQuotaPushRate(t *testing.T) {
	t.Parallel()
	env := startQuota(t, bridge.Quota{PushRate: 2})
	nc := env.NC
	// The bucket holds one second's worth: a push of 2 passes at once, and
	// a put right after it waits for a token, about 500 ms, and is told
	// so. (One request between them: five puts in a row took longer than
	// a token's 200 ms at a rate of 5 on a loaded machine.)
	push(t, nc, "r", `{"messages":[{"data":0},{"data":1}]}`)
	wait := requireQuota(t, request(t, nc, "comb.put.r", `2`), "push rate of 2 messages per second")
	require.LessOrEqual(t, wait, 500*time.Millisecond, "one token's time, not a whole second")
	// A batch larger than the bucket can never pass: it is told to split.
	requireQuota(t, request(t, nc, "comb.push.r", `{"messages":[{"data":1},{"data":2},{"data":3}]}`), "split it")
	time.Sleep(wait)
	m := request(t, nc, "comb.put.r", `2`)
	require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "after the hint: %s", m.Data)
	require.Equal(t, int64(3), retained(t, env, "r").Messages, "nothing stored past the limit")
}

func TestQuotaPushBytesRate(t *testing.T) {
	t.Parallel()
	env := startQuota(t, bridge.Quota{PushBytesRate: 1000})
	nc := env.NC
	// The bucket holds one second's worth. A push of 990 bytes leaves 10,
	// and a second one right after it needs 980 ms of refill: the margin
	// is most of a second, where two pushes of 400 left 200 ms, which a
	// loaded machine's two pushes in a row took (a CI run, 2026-12-05).
	body := `{"messages":[{"data":"` + strings.Repeat("b", 988) + `"}]}` // 990 bytes
	push(t, nc, "b", body)
	requireQuota(t, request(t, nc, "comb.push.b", body), "push rate of 1000 bytes per second")
	require.Equal(t, int64(990), retained(t, env, "b").Bytes)
}

func TestQuotaMaxWaitingPops(t *testing.T) {
	t.Parallel()
	env := startQuota(t, bridge.Quota{MaxWaitingPops: 2})
	nc := env.NC
	call(t, nc, "comb.configure.w", `{}`, nil)
	got := make(chan int, 3)
	longPoll := func() {
		got <- len(pop(t, nc, "w", `{"wait_ms":8000,"max":1}`))
	}
	go longPoll()
	go longPoll()
	require.Eventually(t, func() bool { return env.Bridge.Waiting() == 2 }, 5*time.Second, 10*time.Millisecond)
	requireQuota(t, request(t, nc, "comb.pop.w", `{"wait_ms":1000}`), "max_waiting_pops is 2")
	// A pop that does not wait is not a long poll.
	require.Empty(t, pop(t, nc, "w", `{}`))
	// A message answers one waiter; its place is free again.
	push(t, nc, "w", `{"messages":[{"data":1}]}`)
	require.Equal(t, 1, <-got)
	go longPoll()
	require.Eventually(t, func() bool { return env.Bridge.Waiting() == 2 }, 5*time.Second, 10*time.Millisecond)
	// Two partitions: a lease holds its partition, so one for each.
	push(t, nc, "w", `{"messages":[{"partition":"a","data":2},{"partition":"b","data":3}]}`)
	require.Equal(t, 1, <-got)
	require.Equal(t, 1, <-got)
}

// Quotas are per tenant: one tenant at its limit leaves the other alone,
// and a tenant's own block replaces the default.
func TestQuotaPerTenant(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{
		NATS:          embeddednats.Config{Options: natsOptions(t, twoTenants)},
		ClientOptions: []nats.Option{nats.UserInfo("alice", "pa")},
		Bridge: bridge.Config{Quotas: bridge.Quotas{
			Default: bridge.Quota{MaxQueues: 1},
			Tenants: map[string]bridge.Quota{"B": {MaxQueues: 3}},
		}},
	})
	a := connectAs(t, env, "alice", "pa")
	b := connectAs(t, env, "bob", "pb")
	call(t, a, "comb.configure.q1", `{}`, nil)
	requireQuota(t, request(t, a, "comb.configure.q2", `{}`), "max_queues is 1")
	for _, q := range []string{"q1", "q2", "q3"} {
		call(t, b, "comb.configure."+q, `{}`, nil)
	}
	requireQuota(t, request(t, b, "comb.configure.q4", `{}`), "max_queues is 3")
}
