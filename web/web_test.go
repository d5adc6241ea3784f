package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/broker"
	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/web"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startBroker starts a whole broker with its HTTP listener on a free port
// and the status page sampling every interval.
func startBroker(t *testing.T, interval time.Duration, replay bool) *combtest.Env {
	t.Helper()
	return combtest.StartWith(t, combtest.Options{HTTP: "127.0.0.1:0", Tune: func(c *broker.Config) {
		c.HTTPSampleInterval = interval
		c.HTTPDLQReplay = replay
	}})
}

func get(t *testing.T, u string, out any) int {
	t.Helper()
	res, err := http.Get(u)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"), "%s: %s", u, b)
	require.NoError(t, json.Unmarshal(b, out), "%s: %s", u, b)
	return res.StatusCode
}

func overview(t *testing.T, env *combtest.Env) web.Overview {
	t.Helper()
	var o web.Overview
	require.Equal(t, http.StatusOK, get(t, env.Broker.HTTPURL()+"/api/overview", &o))
	return o
}

func findQueue(o web.Overview, ref domain.QueueRef) (web.Queue, bool) {
	for _, q := range o.Queues {
		if q.Tenant == ref.Tenant && q.Name == ref.Name {
			return q, true
		}
	}
	return web.Queue{}, false
}

// waitSampled waits until a sample newer than since holds ref, and returns
// the overview that shows it.
func waitSampled(t *testing.T, env *combtest.Env, ref domain.QueueRef, since time.Time) web.Overview {
	t.Helper()
	var o web.Overview
	require.Eventually(t, func() bool {
		o = overview(t, env)
		q, ok := findQueue(o, ref)
		n := len(o.Times)
		return ok && n > 0 && o.Times[n-1] > since.UnixMilli() && q.Series.Depth[n-1] != nil
	}, 20*time.Second, 50*time.Millisecond, "a sample of %v after %s", ref, since)
	return o
}

// traffic is what scenario did to the queue "orders": pushes, pops and
// acks whose figures the page must show.
type traffic struct {
	pushed, popped, acked int64
}

// scenario creates "orders" and "idle", waits for a sample of them, then
// pushes 7 messages into orders (eu 4, us 3); group billing pops 3 of eu,
// completes 2 and dead-letters the third; group audit pops 1 of us and
// holds its lease. It returns once a sample has seen all of it.
func scenario(t *testing.T, env *combtest.Env) traffic {
	t.Helper()
	ctx := ctxT(t)
	c := comb.New(env.NC)
	for _, q := range []string{"orders", "idle"} {
		_, err := c.Configure(ctx, q, comb.ConfigPatch{})
		require.NoError(t, err)
	}
	// The groups exist before the first sample, so that the rates count
	// all they do: a group new since the previous sample counts from the
	// next one.
	for _, g := range []string{"billing", "audit"} {
		seek(t, env, "orders", g)
	}
	waitSampled(t, env, domain.Global("orders"), time.Now())

	var msgs []comb.Message
	for i := range 7 {
		part := "eu"
		if i >= 4 {
			part = "us"
		}
		msgs = append(msgs, comb.Message{Partition: part, Data: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	_, err := c.Push(ctx, "orders", msgs)
	require.NoError(t, err)
	got, err := c.Pop(ctx, "orders", comb.PopOptions{Group: "billing", Partition: "eu", Max: 3})
	require.NoError(t, err)
	require.Len(t, got, 3)
	res, err := c.Ack(ctx, "orders", "billing", []comb.Ack{{Partition: "eu", Offset: 1, Lease: got[1].Lease}})
	require.NoError(t, err)
	require.True(t, res[0].OK, res[0].Error)
	res, err = c.Ack(ctx, "orders", "billing", []comb.Ack{{Partition: "eu", Offset: 2, Lease: got[2].Lease, Status: comb.AckDead}})
	require.NoError(t, err)
	require.True(t, res[0].OK, res[0].Error)
	got, err = c.Pop(ctx, "orders", comb.PopOptions{Group: "audit", Partition: "us", Max: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)

	waitSampled(t, env, domain.Global("orders"), time.Now())
	// billing: 3 popped and 3 settled (2 completed, 1 dead); audit: 1
	// popped, 0 settled.
	return traffic{pushed: 7, popped: 4, acked: 3}
}

// seek creates group on queue, reading from the start, with the
// protocol's seek (a pop on an empty queue need not create its group).
func seek(t *testing.T, env *combtest.Env, queue, group string) {
	t.Helper()
	body, err := json.Marshal(protocol.SeekRequest{Group: group, To: protocol.SeekStart})
	require.NoError(t, err)
	msg, err := env.NC.RequestWithContext(ctxT(t), protocol.Subject(env.Broker.Prefix(), protocol.VerbSeek, queue), body)
	require.NoError(t, err)
	require.Empty(t, msg.Header.Get(protocol.HeaderError), "seek: %s", msg.Data)
}

// requireMatchesInfo checks a queue's line against the store's Info.
func requireMatchesInfo(t *testing.T, env *combtest.Env, q web.Queue) {
	t.Helper()
	info, err := env.Store.Info(ctxT(t), domain.InfoParams{Queue: domain.QueueRef{Tenant: q.Tenant, Name: q.Name}, Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, info.Messages, q.Messages, "messages of %s", q.Name)
	require.Equal(t, info.Bytes, q.Bytes, "bytes of %s", q.Name)
	require.Equal(t, info.DeadLetters, q.DeadLetters, "dead letters of %s", q.Name)
	require.EqualValues(t, len(info.Partitions), q.Partitions, "partitions of %s", q.Name)
	var pushed int64
	for _, p := range info.Partitions {
		pushed += p.NextOffset
	}
	require.Equal(t, pushed, q.Pushed, "pushed into %s", q.Name)
	require.Len(t, q.Groups, len(info.Groups), "groups of %s", q.Name)
	for i, g := range info.Groups {
		require.Equal(t, g.Name, q.Groups[i].Name)
		require.Equal(t, g.Pending, q.Groups[i].Pending, "pending of %s/%s", q.Name, g.Name)
		require.Equal(t, g.Leased, q.Groups[i].Leased, "leased of %s/%s", q.Name, g.Name)
	}
}

// integrate adds up rate × interval over a series: the growth the rates
// account for.
func integrate(times []int64, rates []*float64) float64 {
	sum := 0.0
	for i := 1; i < len(times); i++ {
		if rates[i] != nil {
			sum += *rates[i] * float64(times[i]-times[i-1]) / 1000
		}
	}
	return sum
}

func TestOverviewMatchesInfo(t *testing.T) {
	t.Parallel()
	env := startBroker(t, 100*time.Millisecond, false)
	tr := scenario(t, env)
	o := overview(t, env)

	require.True(t, o.Health.Postgres, o.Health.PostgresError)
	require.True(t, o.Health.NATS)
	require.True(t, o.Health.Bridge)
	require.NotEmpty(t, o.Health.Version)
	require.Positive(t, o.Health.UptimeS)
	require.Equal(t, web.Spool{Enabled: false, Note: web.NoSpool}, o.Spool)
	require.False(t, o.Replay)
	// The time between samples: the interval, or longer after a sample
	// slower than samplePaceFloor (a loaded machine).
	require.GreaterOrEqual(t, o.SampleIntervalMS, int64(100))
	require.False(t, o.More)
	require.Empty(t, o.Error)

	require.Len(t, o.Queues, 2)
	for _, q := range o.Queues {
		requireMatchesInfo(t, env, q)
		require.Len(t, q.Series.Depth, len(o.Times))
	}
	orders, _ := findQueue(o, domain.Global("orders"))
	require.Equal(t, int64(7), orders.Messages, "a dead letter's message stays in the log")
	require.Equal(t, int64(7), orders.Pending, "audit has settled nothing: the largest group's pending")
	require.Equal(t, int64(7), orders.Depth, "the backlog is the largest pending")
	idleQ, _ := findQueue(o, domain.Global("idle"))
	require.Zero(t, idleQ.Depth)
	require.NotNil(t, orders.Rates)

	// The rates account for every push, first delivery and ack made after
	// the queue's first sample, whatever the samples' spacing was.
	require.InDelta(t, float64(tr.pushed), integrate(o.Times, orders.Series.Push), 0.05*float64(tr.pushed))
	require.InDelta(t, float64(tr.popped), integrate(o.Times, orders.Series.Pop), 0.05*float64(tr.popped))
	require.InDelta(t, float64(tr.acked), integrate(o.Times, orders.Series.Ack), 0.05*float64(tr.acked))
	idle, _ := findQueue(o, domain.Global("idle"))
	require.Zero(t, integrate(o.Times, idle.Series.Push))
}

func TestQueueAndDeadLetters(t *testing.T) {
	t.Parallel()
	env := startBroker(t, 100*time.Millisecond, false)
	scenario(t, env)
	base := env.Broker.HTTPURL()

	var info protocol.Info
	require.Equal(t, http.StatusOK, get(t, base+"/api/queue?queue=orders", &info))
	want, err := env.Store.Info(ctxT(t), domain.InfoParams{Queue: domain.Global("orders"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, want.Messages, info.Messages)
	require.Len(t, info.Partitions, 2)
	require.Equal(t, protocol.PartitionInfo{Name: "eu", NextOffset: 4}, info.Partitions[0])
	require.Equal(t, []protocol.GroupInfo{{Name: "audit", Pending: 7, Leased: 1}, {Name: "billing", Pending: 4}}, info.Groups)
	require.Empty(t, info.Next)
	// A page of one partition and one group, then the rest.
	var page protocol.Info
	require.Equal(t, http.StatusOK, get(t, base+"/api/queue?queue=orders&limit=1", &page))
	require.Equal(t, info.Partitions[:1], page.Partitions)
	require.Equal(t, info.Groups[:1], page.Groups)
	require.Equal(t, int64(2), page.PartitionCount)
	require.NotEmpty(t, page.Next)
	require.Equal(t, http.StatusOK, get(t, base+"/api/queue?queue=orders&limit=1&after="+url.QueryEscape(page.Next), &page))
	require.Equal(t, info.Partitions[1:], page.Partitions)
	require.Equal(t, info.Groups[1:], page.Groups)
	require.Empty(t, page.Next)

	var dlq protocol.DLQReply
	require.Equal(t, http.StatusOK, get(t, base+"/api/dlq?queue=orders", &dlq))
	require.Len(t, dlq.DeadLetters, 1)
	d := dlq.DeadLetters[0]
	require.Equal(t, "billing", d.Group)
	require.Equal(t, "eu", d.Partition)
	require.Equal(t, int64(2), d.Offset)
	require.JSONEq(t, `{"n":2}`, string(d.Data))

	// Bad input gets a clear error, never a crash.
	var e struct{ Error string }
	for u, code := range map[string]int{
		"/api/queue":                            http.StatusBadRequest,
		"/api/queue?queue=a..b":                 http.StatusBadRequest,
		"/api/queue?queue=a%2Ab":                http.StatusBadRequest,
		"/api/queue?queue=nope":                 http.StatusNotFound,
		"/api/queue?tenant=X&queue=orders":      http.StatusNotFound,
		"/api/queue?queue=orders&limit=0":       http.StatusBadRequest,
		"/api/queue?queue=orders&after=forged":  http.StatusBadRequest,
		"/api/dlq?queue=orders&limit=0":         http.StatusBadRequest,
		"/api/dlq?queue=orders&limit=many":      http.StatusBadRequest,
		"/api/dlq?queue=orders&after=nonsense":  http.StatusBadRequest,
		"/api/dlq?queue=" + url.QueryEscape(""): http.StatusBadRequest,
	} {
		require.Equal(t, code, get(t, base+u, &e), u)
		require.NotEmpty(t, e.Error, u)
	}

	// Replay is off by default: the endpoint says how to turn it on.
	res, err := http.Post(base+"/api/dlq/replay", "application/json",
		strings.NewReader(`{"queue":"orders","ids":["`+d.DLQID+`"]}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Contains(t, string(b), "-http-dlq-replay")
	after, err := env.Store.Info(ctxT(t), domain.InfoParams{Queue: domain.Global("orders"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, int64(1), after.DeadLetters)
}

func TestReplayWhenPermitted(t *testing.T) {
	t.Parallel()
	env := startBroker(t, 100*time.Millisecond, true)
	scenario(t, env)
	base := env.Broker.HTTPURL()
	var dlq protocol.DLQReply
	require.Equal(t, http.StatusOK, get(t, base+"/api/dlq?queue=orders", &dlq))
	require.Len(t, dlq.DeadLetters, 1)
	id := dlq.DeadLetters[0].DLQID

	post := func(contentType, origin, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, base+"/api/dlq/replay", bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	good := `{"queue":"orders","ids":["` + id + `"]}`
	for _, tc := range []struct {
		contentType, origin, body string
		code                      int
	}{
		{"text/plain", "", good, http.StatusUnsupportedMediaType},
		{"application/json", "http://evil.example", good, http.StatusForbidden},
		{"application/json", "", `{"queue":"orders","ids":[]}`, http.StatusBadRequest},
		{"application/json", "", `{"queue":"orders","ids":["x-1"]}`, http.StatusBadRequest},
		{"application/json", "", `{"queue":"orders","ids":["d-1"],"extra":1}`, http.StatusBadRequest},
		{"application/json", "", `not json`, http.StatusBadRequest},
		{"application/json", "", `{"queue":"nope","ids":["d-1"]}`, http.StatusNotFound},
	} {
		code, body := post(tc.contentType, tc.origin, tc.body)
		require.Equal(t, tc.code, code, "%+v: %s", tc, body)
		require.Contains(t, body, `"error"`)
	}

	code, body := post("application/json", base, good)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"done":1}`, body)
	info, err := env.Store.Info(ctxT(t), domain.InfoParams{Queue: domain.Global("orders"), Limit: 1000})
	require.NoError(t, err)
	require.Zero(t, info.DeadLetters)
	require.Equal(t, int64(5), info.Partitions[0].NextOffset, "the dead letter is pushed again into eu")
}

// The page itself and its assets come from the binary, with no reference
// to anything outside it.
func TestAssetsAreServedAndSelfContained(t *testing.T) {
	t.Parallel()
	env := startBroker(t, time.Second, false)
	base := env.Broker.HTTPURL()
	for path, ctype := range map[string]string{
		"/":                 "text/html; charset=utf-8",
		"/assets/app.js":    "text/javascript; charset=utf-8",
		"/assets/style.css": "text/css; charset=utf-8",
	} {
		res, err := http.Get(base + path)
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.Equal(t, ctype, res.Header.Get("Content-Type"), path)
		text := strings.ReplaceAll(string(b), `"http://www.w3.org/2000/svg"`, "") // a name, not a fetch
		require.NotContains(t, text, "http://", path)
		require.NotContains(t, text, "https://", path)
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'", path)
	}
	res, err := http.Get(base + "/nope")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, err = http.Get(base + "/healthz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "the broker's own handlers stay")
}
