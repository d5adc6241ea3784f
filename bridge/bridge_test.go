package bridge_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
)

// The tests speak the protocol with a bare nats.go connection and plain
// JSON, as any client would.

const reqTimeout = 10 * time.Second

type msgOut struct {
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	ID        string          `json:"id"`
	Lease     string          `json:"lease"`
	Attempt   int             `json:"attempt"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
	DataB64   *string         `json:"data_b64"`
}

func (m msgOut) bytes(t testing.TB) []byte {
	t.Helper()
	if m.DataB64 != nil {
		require.Nil(t, m.Data)
		b, err := base64.StdEncoding.DecodeString(*m.DataB64)
		require.NoError(t, err)
		return b
	}
	require.NotNil(t, m.Data)
	return m.Data
}

type pushResult struct {
	Partition string `json:"partition"`
	Offset    *int64 `json:"offset"`
	Status    string `json:"status"`
}

type ackResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

type deadLetter struct {
	DLQID     string          `json:"dlq_id"`
	Group     string          `json:"group"`
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	ID        string          `json:"id"`
	Attempts  int             `json:"attempts"`
	Reason    string          `json:"reason"`
	Error     string          `json:"error"`
	DeadAt    time.Time       `json:"dead_at"`
	Data      json.RawMessage `json:"data"`
	DataB64   *string         `json:"data_b64"`
}

// request sends body on subject and returns the reply, failing the test on
// a transport error.
func request(t testing.TB, nc *nats.Conn, subject string, body string) *nats.Msg {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), reqTimeout)
	require.NoError(t, err, "request %s", subject)
	return m
}

// call sends a request that must succeed and decodes its reply into out.
func call(t testing.TB, nc *nats.Conn, subject, body string, out any) {
	t.Helper()
	m := request(t, nc, subject, body)
	require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "%s: error reply %s", subject, m.Data)
	if out != nil {
		dec := json.NewDecoder(strings.NewReader(string(m.Data)))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(out), "%s: reply %s", subject, m.Data)
	}
}

// requireError checks that a reply is the protocol's error with code, in
// the micro headers and in the body, and that its message has want.
func requireError(t testing.TB, m *nats.Msg, code int, want string) {
	t.Helper()
	require.Equal(t, strconv.Itoa(code), m.Header.Get(micro.ErrorCodeHeader), "reply %s", m.Data)
	require.NotEmpty(t, m.Header.Get(micro.ErrorHeader))
	var body struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(string(m.Data)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body), "error body %s", m.Data)
	require.Equal(t, code, body.Error.Code)
	require.Contains(t, body.Error.Message, want)
	require.Equal(t, body.Error.Message, m.Header.Get(micro.ErrorHeader))
}

func push(t testing.TB, nc *nats.Conn, queue, body string) []pushResult {
	t.Helper()
	var rep struct {
		Results []pushResult `json:"results"`
	}
	call(t, nc, "comb.push."+queue, body, &rep)
	return rep.Results
}

func pop(t testing.TB, nc *nats.Conn, queue, body string) []msgOut {
	t.Helper()
	var rep struct {
		Messages []msgOut `json:"messages"`
	}
	call(t, nc, "comb.pop."+queue, body, &rep)
	require.NotNil(t, rep.Messages, "messages must be [], not null")
	return rep.Messages
}

func ack(t testing.TB, nc *nats.Conn, queue, body string) []ackResult {
	t.Helper()
	var rep struct {
		Results []ackResult `json:"results"`
	}
	call(t, nc, "comb.ack."+queue, body, &rep)
	return rep.Results
}

func ackBody(group string, m msgOut, status string) string {
	return fmt.Sprintf(`{"group":%q,"acks":[{"partition":%q,"offset":%d,"lease":%q,"status":%q}]}`,
		group, m.Partition, m.Offset, m.Lease, status)
}

type queueInfo struct {
	Name        string           `json:"name"`
	Config      map[string]any   `json:"config"`
	CreatedAt   time.Time        `json:"created_at"`
	Messages    int64            `json:"messages"`
	Bytes       int64            `json:"bytes"`
	DeadLetters int64            `json:"dead_letters"`
	PartCount   int64            `json:"partition_count"`
	GroupCount  int64            `json:"group_count"`
	Partitions  []map[string]any `json:"partitions"`
	Groups      []map[string]any `json:"groups"`
	Next        string           `json:"next"`
}

func info(t testing.TB, nc *nats.Conn, queue string) queueInfo {
	t.Helper()
	var qi queueInfo
	call(t, nc, "comb.info."+queue, "", &qi)
	return qi
}

func TestPushPopAck(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC

	res := push(t, nc, "orders", `{"messages":[{"partition":"eu","id":"order-7","data":{"sku": 42}},
		{"data_b64":"AAEC"},{"data_b64":""},{"partition":"eu","data":"text"}]}`)
	require.Len(t, res, 4)
	for i, want := range []struct {
		partition string
		offset    int64
	}{{"eu", 0}, {"default", 0}, {"default", 1}, {"eu", 1}} {
		require.Equal(t, "stored", res[i].Status)
		require.Equal(t, want.partition, res[i].Partition)
		require.NotNil(t, res[i].Offset)
		require.Equal(t, want.offset, *res[i].Offset)
	}

	msgs := pop(t, nc, "orders", `{"partition":"eu","max":10}`)
	require.Len(t, msgs, 2)
	require.Equal(t, `{"sku": 42}`, string(msgs[0].bytes(t)), "bytes kept as pushed")
	require.Equal(t, "order-7", msgs[0].ID)
	require.Equal(t, `"text"`, string(msgs[1].bytes(t)))
	require.Equal(t, 1, msgs[0].Attempt)
	require.NotEmpty(t, msgs[0].Lease)
	require.WithinDuration(t, time.Now(), msgs[0].CreatedAt, time.Minute)

	other := pop(t, nc, "orders", `{"partition":"default","max":10}`)
	require.Len(t, other, 2)
	require.Equal(t, []byte{0, 1, 2}, other[0].bytes(t))
	require.Equal(t, []byte{}, other[1].bytes(t))

	// Acking the last offset settles the lease cumulatively.
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "orders", ackBody("default", msgs[1], "completed")))
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "orders",
		fmt.Sprintf(`{"acks":[{"partition":"default","offset":1,"lease":%q}]}`, other[1].Lease)))
	require.Empty(t, pop(t, nc, "orders", ``))
	require.Empty(t, pop(t, nc, "orders", `{}`))

	// Another group sees everything again, in offset order per partition.
	all := pop(t, nc, "orders", `{"group":"audit","partitions":2,"max":10}`)
	require.Len(t, all, 4)

	// A second ack under the settled lease settles nothing and says so.
	results := ack(t, nc, "orders", ackBody("default", msgs[1], "completed"))
	require.Len(t, results, 1)
	require.False(t, results[0].OK)
	require.NotEmpty(t, results[0].Error)
}

func TestPut(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	call(t, nc, "comb.configure.puts", `{"dedup_window_s":60}`, nil)

	send := func(body []byte, hdr nats.Header) pushResult {
		m, err := nc.RequestMsg(&nats.Msg{Subject: "comb.put.puts", Data: body, Header: hdr}, reqTimeout)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)
		var rep struct {
			Results []pushResult `json:"results"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &rep))
		require.Len(t, rep.Results, 1)
		return rep.Results[0]
	}
	r := send([]byte("raw \x00\xff bytes"), nats.Header{"Comb-Partition": {"eu"}, "Comb-Id": {"p-1"}})
	require.Equal(t, "stored", r.Status)
	require.Equal(t, "eu", r.Partition)
	r = send([]byte("again"), nats.Header{"comb-partition": {"eu"}, "COMB-ID": {"p-1"}})
	require.Equal(t, "duplicate", r.Status, "headers match without regard to case")
	require.EqualValues(t, 0, *r.Offset)
	r = send(nil, nil)
	require.Equal(t, "default", r.Partition)

	msgs := pop(t, nc, "puts", `{"partition":"eu"}`)
	require.Len(t, msgs, 1)
	require.Equal(t, []byte("raw \x00\xff bytes"), msgs[0].bytes(t))
	require.Equal(t, "p-1", msgs[0].ID)
	msgs = pop(t, nc, "puts", `{"partition":"default"}`)
	require.Len(t, msgs, 1)
	require.Equal(t, []byte{}, msgs[0].bytes(t))

	m := request(t, nc, "comb.put.puts", "x")
	require.Empty(t, m.Header.Get(micro.ErrorCodeHeader))
	m, err := nc.RequestMsg(&nats.Msg{Subject: "comb.put.puts", Data: []byte("x"), Header: nats.Header{"Comb-Partition": {"a\tb"}}}, reqTimeout)
	require.NoError(t, err)
	requireError(t, m, 400, "Comb-Partition header")
}

func TestAckStatuses(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	call(t, nc, "comb.configure.st", `{"max_attempts":2}`, nil)
	push(t, nc, "st", `{"messages":[{"data":0},{"data":1},{"data":2},{"data":3}]}`)

	// retry: done up to N-1; N and the rest come back at once, same attempt.
	msgs := pop(t, nc, "st", `{"max":4}`)
	require.Len(t, msgs, 4)
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "st", ackBody("default", msgs[1], "retry")))
	msgs = pop(t, nc, "st", `{"max":4}`)
	require.Len(t, msgs, 3)
	require.EqualValues(t, 1, msgs[0].Offset)
	require.Equal(t, 1, msgs[0].Attempt, "retry spends no attempt")

	// failed: spends an attempt; redelivered with attempt 2.
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "st", ackBody("default", msgs[0], "failed")))
	msgs = pop(t, nc, "st", `{"max":4}`)
	require.Len(t, msgs, 3)
	require.EqualValues(t, 1, msgs[0].Offset)
	require.Equal(t, 2, msgs[0].Attempt)

	// failed again: max_attempts spent, message 1 goes to the dead letters.
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "st", ackBody("default", msgs[0], "failed")))
	msgs = pop(t, nc, "st", `{"max":4}`)
	require.Len(t, msgs, 2)
	require.EqualValues(t, 2, msgs[0].Offset)

	// dead: message 2 goes to the dead letters at once; like completed, it
	// settles up to N and the lease goes on for the rest.
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "st", ackBody("default", msgs[0], "dead")))
	require.EqualValues(t, 3, msgs[1].Offset)
	require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "st", ackBody("default", msgs[1], "completed")))
	require.Empty(t, pop(t, nc, "st", ``))

	var dl struct {
		DeadLetters []deadLetter `json:"dead_letters"`
		Next        string       `json:"next"`
	}
	call(t, nc, "comb.dlq.st", ``, &dl)
	require.Len(t, dl.DeadLetters, 2)
	require.Empty(t, dl.Next)
	require.EqualValues(t, 1, dl.DeadLetters[0].Offset)
	require.Equal(t, "failed", dl.DeadLetters[0].Reason)
	require.Equal(t, 2, dl.DeadLetters[0].Attempts)
	require.Equal(t, "1", string(dl.DeadLetters[0].Data))
	require.EqualValues(t, 2, dl.DeadLetters[1].Offset)
	require.Equal(t, "dead", dl.DeadLetters[1].Reason)
	require.Equal(t, "default", dl.DeadLetters[1].Group)

	// Paging.
	var page struct {
		DeadLetters []deadLetter `json:"dead_letters"`
		Next        string       `json:"next"`
	}
	call(t, nc, "comb.dlq.st", `{"limit":1}`, &page)
	require.Len(t, page.DeadLetters, 1)
	require.Equal(t, dl.DeadLetters[0].DLQID, page.Next)
	call(t, nc, "comb.dlq.st", fmt.Sprintf(`{"limit":1,"after":%q}`, page.Next), &page)
	require.Equal(t, dl.DeadLetters[1].DLQID, page.DeadLetters[0].DLQID)

	// Replay pushes a dead letter again as a new message; purge drops one.
	var done struct {
		Done int `json:"done"`
	}
	call(t, nc, "comb.dlq.st", fmt.Sprintf(`{"replay":[%q]}`, dl.DeadLetters[0].DLQID), &done)
	require.Equal(t, 1, done.Done)
	msgs = pop(t, nc, "st", ``)
	require.Len(t, msgs, 1)
	require.EqualValues(t, 4, msgs[0].Offset)
	require.Equal(t, "1", string(msgs[0].bytes(t)))
	call(t, nc, "comb.dlq.st", fmt.Sprintf(`{"purge":[%q]}`, dl.DeadLetters[1].DLQID), &done)
	require.Equal(t, 1, done.Done)
	call(t, nc, "comb.dlq.st", ``, &dl)
	require.Empty(t, dl.DeadLetters)
}

func TestRenew(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	push(t, nc, "rn", `{"messages":[{"data":1}]}`)
	msgs := pop(t, nc, "rn", `{"lease_ms":1000}`)
	require.Len(t, msgs, 1)
	var rep struct {
		Results []struct {
			Lease     string    `json:"lease"`
			OK        bool      `json:"ok"`
			ExpiresAt time.Time `json:"expires_at"`
			Error     string    `json:"error"`
		} `json:"results"`
	}
	call(t, nc, "comb.renew.rn", fmt.Sprintf(`{"leases":[%q,"l-nope"],"lease_ms":60000}`, msgs[0].Lease), &rep)
	require.Len(t, rep.Results, 2)
	require.True(t, rep.Results[0].OK)
	require.Equal(t, msgs[0].Lease, rep.Results[0].Lease)
	require.WithinDuration(t, time.Now().Add(time.Minute), rep.Results[0].ExpiresAt, 10*time.Second)
	require.False(t, rep.Results[1].OK)
	require.NotEmpty(t, rep.Results[1].Error)
	requireError(t, request(t, nc, "comb.renew.rn", `{"leases":[]}`), 400, "leases")
}

func TestConfigureInfoListDelete(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC

	var cfg map[string]any
	call(t, nc, "comb.configure.billing.invoices", `{"lease_ms":5000}`, &cfg)
	require.EqualValues(t, 5000, cfg["lease_ms"])
	require.EqualValues(t, 3, cfg["max_attempts"], "defaults kept")
	call(t, nc, "comb.configure.billing.invoices", `{"max_attempts":7}`, &cfg)
	require.EqualValues(t, 5000, cfg["lease_ms"], "configure merges, never resets")
	require.EqualValues(t, 7, cfg["max_attempts"])
	require.Len(t, cfg, 13)

	push(t, nc, "billing.invoices", `{"messages":[{"data":1},{"partition":"p2","data":2}]}`)
	push(t, nc, "auto", `{"messages":[{"data":1}]}`)
	var auto map[string]any
	call(t, nc, "comb.configure.auto", ``, &auto)
	defaults := map[string]any{}
	require.NoError(t, json.Unmarshal(request(t, nc, "comb.configure.fresh", "{}").Data, &defaults))
	require.Equal(t, defaults, auto, "a queue created by a push has the defaults of one created by configure")

	qi := info(t, nc, "billing.invoices")
	require.Equal(t, "billing.invoices", qi.Name)
	require.EqualValues(t, 2, qi.Messages)
	require.Len(t, qi.Partitions, 2)
	require.EqualValues(t, 5000, qi.Config["lease_ms"])

	var list struct {
		Queues []struct {
			Name       string `json:"name"`
			Partitions int64  `json:"partitions"`
			Messages   int64  `json:"messages"`
			Bytes      int64  `json:"bytes"`
			Groups     int64  `json:"groups"`
			Pending    int64  `json:"pending"`
		} `json:"queues"`
		Next string `json:"next"`
	}
	call(t, nc, "comb.list", ``, &list)
	var names []string
	for _, q := range list.Queues {
		names = append(names, q.Name)
	}
	require.Equal(t, []string{"auto", "billing.invoices", "fresh"}, names)

	call(t, nc, "comb.delete.billing.invoices", ``, nil)
	requireError(t, request(t, nc, "comb.info.billing.invoices", ""), 404, "")
	requireError(t, request(t, nc, "comb.delete.billing.invoices", ""), 404, "")
	call(t, nc, "comb.list", `{}`, &list)
	require.Len(t, list.Queues, 2)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{MaxMessageBytes: 1000, MaxRequestBytes: 4000, PendingBytes: 1 << 20}})
	nc := env.NC
	call(t, nc, "comb.configure.e", `{"max_message_bytes":100}`, nil)
	push(t, nc, "e", `{"messages":[{"data":"good-1"},{"partition":"p","data":"good-2"}]}`)

	cases := []struct {
		subject, body string
		code          int
		want          string
	}{
		{"comb.push.e", `{"messages":[{"data":1}`, 400, "malformed JSON"},
		{"comb.push.e", `not json`, 400, "must be a JSON object"},
		{"comb.push.e", `{"messages":[{"data":1,"partiton":"x"}]}`, 400, `messages[0]: unknown field "partiton"`},
		{"comb.push.e", `{"messages":[{"data":1},{}]}`, 400, "messages[1]: one of data or data_b64"},
		{"comb.push.e", `{"messages":[{"data":1,"partition":"a\u0000"}]}`, 400, "messages[0].partition: control character"},
		{"comb.push.e", `{"messages":[{"data":"` + strings.Repeat("x", 1000) + `"}]}`, 413, "over the limit of 1000"},
		{"comb.push.e", `{"messages":[{"data":"` + strings.Repeat("x", 200) + `"}]}`, 413, ""},
		{"comb.push.e", `{"messages":[` + strings.Repeat(`{"data":"`+strings.Repeat("x", 90)+`"},`, 40) + `{"data":1}]}`, 413, "request is"},
		{"comb.push.e.a$b", `{"messages":[{"data":1}]}`, 400, "queue name"},
		{"comb.push." + strings.Repeat("a.", 16) + "a", `{"messages":[{"data":1}]}`, 400, "17 tokens"},
		{"comb.pop.e", `{"max":0}`, 400, "max: 0 is out of range"},
		{"comb.pop.e", `{"wait":1}`, 400, `unknown field "wait"`},
		{"comb.pop.e", `{"from":"tomorrow"}`, 400, "from"},
		{"comb.pop.nope", ``, 404, ""},
		{"comb.ack.e", `{"acks":[{"offset":0,"lease":"l","status":"finished"}]}`, 400, `unknown status "finished"`},
		{"comb.ack.nope", `{"acks":[{"offset":0,"lease":"l"}]}`, 404, ""},
		{"comb.configure.e", `{"lease_ms":5}`, 400, "lease_ms"},
		{"comb.configure.e", `{"max_attempt":5}`, 400, `unknown field "max_attempt"`},
		{"comb.info.nope", ``, 404, ""},
		{"comb.info.e", `{"x":1}`, 400, `unknown field "x"`},
		{"comb.delete.nope", ``, 404, ""},
		{"comb.dlq.nope", ``, 404, ""},
		{"comb.dlq.e", `{"replay":["bogus"]}`, 400, "bogus"},
		{"comb.renew.e", `{"leases":["l"],"lease_ms":1}`, 400, "lease_ms"},
		// Names are bytes: never stored under U+FFFD.
		{"comb.push.e", "{\"messages\":[{\"data\":1,\"partition\":\"eu\xff\"}]}", 400, "messages[0].partition: invalid UTF-8 at byte"},
		{"comb.push.e", `{"messages":[{"data":1},{"data":2,"id":"x\ud800"}]}`, 400, `messages[1].id: a lone surrogate \ud800`},
		{"comb.pop.e", "{\"group\":\"g\xc3\"}", 400, "group: invalid UTF-8"},
		{"comb.ack.e", `{"acks":[{"partition":"\udc00","offset":0,"lease":"l"}]}`, 400, `acks[0].partition: a lone surrogate \udc00`},
		{"comb.seek.e", `{"group":"\ud800\u0041","to":"end"}`, 400, "group: a lone surrogate"},
		{"comb.dlq.e", "{\"group\":\"\xff\"}", 400, "group: invalid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.subject, func(t *testing.T) {
			requireError(t, request(t, nc, c.subject, c.body), c.code, c.want)
		})
	}

	// A status error refuses the whole request: the good ack in it settles
	// nothing.
	msgs := pop(t, nc, "e", `{"partitions":2,"max":10}`)
	require.Len(t, msgs, 2)
	bad := fmt.Sprintf(`{"acks":[{"partition":%q,"offset":%d,"lease":%q},{"partition":%q,"offset":%d,"lease":%q,"status":"nope"}]}`,
		msgs[0].Partition, msgs[0].Offset, msgs[0].Lease, msgs[1].Partition, msgs[1].Offset, msgs[1].Lease)
	requireError(t, request(t, nc, "comb.ack.e", bad), 400, "unknown status")

	// Bad input left the data as it was: two messages, both still leased,
	// both settle now.
	qi := info(t, nc, "e")
	require.EqualValues(t, 2, qi.Messages)
	var parts []string
	for _, p := range qi.Partitions {
		parts = append(parts, p["name"].(string))
	}
	require.Equal(t, []string{"default", "p"}, parts, "no bad name made a partition")
	for _, m := range msgs {
		require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "e", ackBody("default", m, "completed")))
	}
	require.Empty(t, pop(t, nc, "e", `{"partitions":2}`))
	require.Equal(t, "good-1", strings.Trim(string(msgs[0].bytes(t)), `"`)+"")
}

func TestLongPollWokenByPush(t *testing.T) {
	t.Parallel()
	// No safety-net retries during the test: only a wake-up can end the poll early.
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	call(t, nc, "comb.configure.lp", ``, nil)

	// Nothing ready: an empty reply after wait_ms.
	start := time.Now()
	require.Empty(t, pop(t, nc, "lp", `{"wait_ms":200}`))
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)

	got := make(chan []msgOut, 1)
	start = time.Now()
	go func() {
		var rep struct {
			Messages []msgOut `json:"messages"`
		}
		m, err := nc.Request("comb.pop.lp", []byte(`{"wait_ms":8000}`), reqTimeout)
		if err == nil {
			err = json.Unmarshal(m.Data, &rep)
		}
		if err != nil {
			t.Error(err)
		}
		got <- rep.Messages
	}()
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 })
	push(t, nc, "lp", `{"messages":[{"data":"wake"}]}`)
	select {
	case msgs := <-got:
		require.Len(t, msgs, 1)
		require.Equal(t, `"wake"`, string(msgs[0].Data))
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(reqTimeout):
		t.Fatal("long poll was not woken")
	}
	require.Zero(t, env.Bridge.Waiting())
}

func TestLongPollWakeAcrossBridges(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	second := combtest.AddBridge(t, env, bridge.Config{RetryInterval: time.Hour})
	call(t, nc, "comb.configure.x", ``, nil)

	// Park pops, each in its own group, until both bridges hold some.
	var wg sync.WaitGroup
	results := make(chan int, 64)
	n := 0
	for ; n < 32 && (env.Bridge.Waiting() == 0 || second.Waiting() == 0); n++ {
		wg.Add(1)
		go func(group string) {
			defer wg.Done()
			var rep struct {
				Messages []msgOut `json:"messages"`
			}
			m, err := nc.Request("comb.pop.x", []byte(`{"wait_ms":8000,"group":"`+group+`"}`), reqTimeout)
			if err == nil {
				err = json.Unmarshal(m.Data, &rep)
			}
			if err != nil {
				t.Error(err)
			}
			results <- len(rep.Messages)
		}("g" + strconv.Itoa(n))
		want := n + 1
		waitFor(t, func() bool { return env.Bridge.Waiting()+second.Waiting() == want })
	}
	require.Positive(t, env.Bridge.Waiting())
	require.Positive(t, second.Waiting())

	start := time.Now()
	push(t, nc, "x", `{"messages":[{"data":1}]}`)
	wg.Wait()
	close(results)
	require.Less(t, time.Since(start), 5*time.Second)
	for got := range results {
		require.Equal(t, 1, got, "every group's pop got the message")
	}
}

func TestPopsOverloaded(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{MaxPops: 2, RetryInterval: time.Hour}})
	nc := env.NC
	call(t, nc, "comb.configure.o", ``, nil)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := nc.Request("comb.pop.o", []byte(`{"wait_ms":500}`), reqTimeout)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, func() bool { return env.Bridge.Waiting() == 2 })
	requireError(t, request(t, nc, "comb.pop.o", `{}`), 429, "overloaded")
	wg.Wait()
	require.Empty(t, pop(t, nc, "o", ``), "a slot is free again")
	require.EqualValues(t, 1, env.Bridge.Stats().Overloaded)
}

// TestLongPollWakesOnlyWhatIsReady checks that a push wakes one waiting
// pop per group, and those that asked for its partition, not every pop of
// the queue.
func TestLongPollWakesOnlyWhatIsReady(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	call(t, nc, "comb.configure.w", ``, nil)
	type result struct {
		name string
		n    int
	}
	results := make(chan result, 8)
	poll := func(name, body string) {
		var rep struct {
			Messages []msgOut `json:"messages"`
		}
		m, err := nc.Request("comb.pop.w", []byte(body), reqTimeout)
		if err == nil {
			err = json.Unmarshal(m.Data, &rep)
		}
		if err != nil {
			t.Error(err)
		}
		results <- result{name, len(rep.Messages)}
	}
	bodies := map[string]string{
		"g1": `{"group":"g","wait_ms":1500}`, "g2": `{"group":"g","wait_ms":1500}`, "g3": `{"group":"g","wait_ms":1500}`,
		"h": `{"group":"h","wait_ms":1500}`, "g-eu": `{"group":"g","partition":"eu","wait_ms":1500}`,
	}
	for name, body := range bodies {
		go poll(name, body)
	}
	waitFor(t, func() bool { return env.Bridge.Waiting() == 5 })
	push(t, nc, "w", `{"messages":[{"partition":"us","data":1}]}`)

	// One pop of g and the pop of h get the message at once.
	got := map[string]int{}
	for range 2 {
		select {
		case r := <-results:
			got[r.name] = r.n
		case <-time.After(reqTimeout):
			t.Fatal("no pop was woken")
		}
	}
	require.Equal(t, 1, got["h"])
	delete(got, "h")
	require.Len(t, got, 1)
	for name, n := range got {
		require.Contains(t, []string{"g1", "g2", "g3"}, name)
		require.Equal(t, 1, n)
	}
	require.Equal(t, 3, env.Bridge.Waiting(), "the others still wait")
	for range 3 {
		r := <-results
		require.Zero(t, r.n, r.name)
	}
}

func TestStopAnswersLongPolls(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	nc := env.NC
	call(t, nc, "comb.configure.s", ``, nil)
	got := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request("comb.pop.s", []byte(`{"wait_ms":60000}`), reqTimeout)
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	waitFor(t, func() bool { return env.Bridge.Waiting() == 1 })
	start := time.Now()
	env.Bridge.Stop()
	env.Bridge.Stop() // safe twice
	require.Less(t, time.Since(start), 5*time.Second)
	m := <-got
	require.NotNil(t, m)
	require.Equal(t, `{"messages":[]}`, string(m.Data))
	_, err := nc.Request("comb.pop.s", nil, 200*time.Millisecond)
	require.ErrorIs(t, err, nats.ErrNoResponders)
}

func TestConcurrentPushesCoalesce(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	const clients, each = 8, 25
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				body := fmt.Sprintf(`{"messages":[{"partition":"p%d","data":%d}]}`, c%3, c*1000+i)
				m, err := nc.Request("comb.push.co", []byte(body), reqTimeout)
				if err != nil {
					t.Errorf("push: %v", err)
					return
				}
				if m.Header.Get(micro.ErrorCodeHeader) != "" {
					t.Errorf("push: %s", m.Data)
					return
				}
			}
		}()
	}
	wg.Wait()
	qi := info(t, nc, "co")
	require.EqualValues(t, clients*each, qi.Messages)
	seen := map[string]bool{}
	for range 20 {
		msgs := pop(t, nc, "co", `{"partitions":3,"max":1000}`)
		if len(msgs) == 0 {
			break
		}
		last := map[string]msgOut{}
		for _, m := range msgs {
			require.False(t, seen[string(m.Data)], "delivered twice")
			seen[string(m.Data)] = true
			last[m.Partition] = m
		}
		for _, m := range last {
			require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "co", ackBody("default", m, "completed")))
		}
	}
	require.Len(t, seen, clients*each)
}

// waitFor polls cond until it holds, failing the test after reqTimeout.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, reqTimeout, 5*time.Millisecond)
}

// TestStopUnderLoad stops a bridge while producers push: every request is
// answered (stored, or refused with 503 / no responders), none is left to
// time out, and every push answered "stored" is in the store.
func TestStopUnderLoad(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	nc := env.NC
	call(t, nc, "comb.configure.load", ``, nil)

	const producers = 6
	var stored, refused atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000; i++ {
				body := fmt.Sprintf(`{"messages":[{"partition":"p%d","data":%d},{"partition":"p%d","data":%d}]}`, p, i, p, i)
				m, err := nc.Request("comb.push.load", []byte(body), 5*time.Second)
				switch {
				case errors.Is(err, nats.ErrNoResponders):
					return
				case err != nil:
					t.Errorf("push: %v", err)
					return
				case m.Header.Get(micro.ErrorCodeHeader) == "503":
					refused.Add(1)
				case m.Header.Get(micro.ErrorCodeHeader) != "":
					t.Errorf("push: %s", m.Data)
					return
				default:
					stored.Add(2)
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	waitFor(t, func() bool { return stored.Load() >= 200 })
	env.Bridge.Stop()
	close(stop)
	wg.Wait()

	qi, err := env.Store.Info(t.Context(), domain.InfoParams{Queue: domain.Global("load"), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, stored.Load(), qi.Messages, "every push answered stored is stored, and no other")
	t.Logf("stored %d messages, %d pushes refused while stopping", stored.Load(), refused.Load())
}

// TestPopReplyFitsMaxPayload pops more than one NATS message can carry: the
// reply holds the oldest messages that fit, and a message that can never
// fit is a 413, not a reply the server would refuse.
func TestPopReplyFitsMaxPayload(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{NATS: embeddednats.Config{MaxPayload: 4096}})
	nc := env.NC
	for i := range 10 {
		push(t, nc, "big", fmt.Sprintf(`{"messages":[{"data":"%03d%s"}]}`, i, strings.Repeat("x", 600)))
	}
	// The store leases only what fits: after an ack of what came, the rest
	// comes at once, not after the lease expires.
	var next int64
	for range 10 {
		msgs := pop(t, nc, "big", `{"max":10,"lease_ms":600000}`)
		if len(msgs) == 0 {
			break
		}
		require.Less(t, len(msgs), 10)
		for _, m := range msgs {
			require.Equal(t, next, m.Offset)
			require.Equal(t, 1, m.Attempt)
			next++
		}
		require.Equal(t, []ackResult{{OK: true}}, ack(t, nc, "big", ackBody("default", msgs[len(msgs)-1], "completed")))
	}
	require.EqualValues(t, 10, next)

	// 3000 bytes that are not JSON would travel as 4000 bytes of base64:
	// refused at the push, since no pop could deliver them.
	m, err := nc.RequestMsg(&nats.Msg{Subject: "comb.put.huge", Data: make([]byte, 3000)}, reqTimeout)
	require.NoError(t, err)
	requireError(t, m, 413, "max_payload")
	m, err = nc.RequestMsg(&nats.Msg{Subject: "comb.put.huge", Data: []byte(`"` + strings.Repeat("j", 1500) + `"`)}, reqTimeout)
	require.NoError(t, err)
	require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "JSON travels as is: %s", m.Data)
}

// A long-polling pop whose requester has gone (its connection closed) is
// dropped when woken, before it leases anything: the message goes to the
// next consumer at once, not after the orphan's lease expires.
func TestVanishedLongPollLeasesNothing(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	call(t, env.NC, "comb.configure.v", `{"lease_ms":60000}`, nil)

	gone, err := nats.Connect(env.URL)
	require.NoError(t, err)
	inbox := gone.NewRespInbox()
	_, err = gone.SubscribeSync(inbox)
	require.NoError(t, err)
	require.NoError(t, gone.PublishRequest("comb.pop.v", inbox, []byte(`{"wait_ms":20000}`)))
	require.NoError(t, gone.Flush())
	require.Eventually(t, func() bool { return env.Bridge.Waiting() == 1 }, 10*time.Second, 5*time.Millisecond)
	gone.Close()
	require.Eventually(t, func() bool { return !env.Server.HasInterest("", inbox) }, 10*time.Second, 5*time.Millisecond)

	push(t, env.NC, "v", `{"messages":[{"data":"for the living"}]}`)
	require.Eventually(t, func() bool { return env.Bridge.Stats().InFlight == 0 }, 10*time.Second, 5*time.Millisecond,
		"the woken orphan is answered or dropped")
	msgs := pop(t, env.NC, "v", `{}`)
	require.Len(t, msgs, 1, "the orphan leased nothing")
	require.Equal(t, 1, msgs[0].Attempt)
}

// The push endpoint's micro stats carry the broker's maintenance state
// (and its spool, when it has one), as /readyz does.
func TestStatsCarryMaintenance(t *testing.T) {
	t.Parallel()
	env := combtest.Start(t)
	m := request(t, env.NC, "$SRV.STATS.comb", "")
	var st micro.Stats
	require.NoError(t, json.Unmarshal(m.Data, &st))
	var push map[string]any
	for _, e := range st.Endpoints {
		if e.Name == "push" {
			require.NoError(t, json.Unmarshal(e.Data, &push))
		}
	}
	require.NotNil(t, push, "%s", m.Data)
	require.Equal(t, false, push["maintenance"])
	require.NotContains(t, push, "spool", "combtest runs without a spool")
}

// TestNoWakeUpLostUnderLoad: with no safety-net retries, what a bridge
// knows of a group's ready partitions (marks, candidates, and what pops
// that read every cursor report) must never leave a message waiting.
// Producers push single messages to random partitions while long-polling
// consumers on two bridges pop and ack; every message must come, long
// before the one-hour retry interval could have found a forgotten one.
func TestNoWakeUpLostUnderLoad(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{RetryInterval: time.Hour}})
	combtest.AddBridge(t, env, bridge.Config{RetryInterval: time.Hour})
	nc := env.NC
	call(t, nc, "comb.configure.nl", ``, nil)
	const producers, each, partitions, consumers, wide = 4, 300, 400, 8, 70
	const total = producers*each + 3*wide
	// Long polls outlast the test: a poll whose wait ends reads every
	// cursor before it answers, which would find a forgotten message.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var got sync.Map
	var delivered atomic.Int64
	var wg sync.WaitGroup
	for c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"wait_ms":60000,"max":%d,"partitions":%d}`, 1+c%3, 1+c%2)
			for ctx.Err() == nil {
				m, err := nc.RequestWithContext(ctx, "comb.pop.nl", []byte(body))
				if err != nil {
					continue
				}
				var rep struct {
					Messages []msgOut `json:"messages"`
				}
				if err := json.Unmarshal(m.Data, &rep); err != nil {
					t.Error(err)
					return
				}
				for _, msg := range rep.Messages {
					if _, dup := got.LoadOrStore(string(msg.Data), true); !dup && delivered.Add(1) == total {
						cancel()
					}
					if _, err := nc.Request("comb.ack.nl", []byte(ackBody("", msg, "completed")), reqTimeout); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var b strings.Builder
				fmt.Fprintf(&b, `{"messages":[{"partition":"p%d","data":"%d-%d"}`, rand.IntN(partitions), p, i)
				if p == 0 && i%50 == 0 && i < 150 {
					// At first, pushes to more partitions than a wake-up
					// names end every mark: pops read every cursor again,
					// and learn what is ready once few partitions are.
					for k := range wide {
						fmt.Fprintf(&b, `,{"partition":"p%d","data":"w%d-%d"}`, k, i, k)
					}
				}
				b.WriteString(`]}`)
				if _, err := nc.Request("comb.push.nl", []byte(b.String()), reqTimeout); err != nil {
					t.Error(err)
					return
				}
				if i%16 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(total), delivered.Load(), "messages left waiting: a wake-up was lost")
}
