package comb_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/protocol"
)

// fakeService answers every request on <prefix>.> with the reply given for
// its subject and records what it received, so that a test sees the exact
// bytes the client sends and feeds it replies of its choosing.
type fakeService struct {
	got chan *nats.Msg
}

func startFake(t *testing.T, nc *nats.Conn, prefix string, replies map[string]*nats.Msg) *fakeService {
	t.Helper()
	f := &fakeService{got: make(chan *nats.Msg, 16)}
	sub, err := nc.Subscribe(prefix+".>", func(m *nats.Msg) {
		f.got <- m
		out := &nats.Msg{Subject: m.Reply, Data: []byte(`{}`)}
		if rep, ok := replies[m.Subject]; ok {
			out.Header, out.Data = rep.Header, rep.Data
		}
		_ = m.RespondMsg(out)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return f
}

// next returns the request the fake received next.
func (f *fakeService) next(t *testing.T) *nats.Msg {
	t.Helper()
	select {
	case m := <-f.got:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no request reached the fake service")
		return nil
	}
}

func reply(body string) *nats.Msg { return &nats.Msg{Data: []byte(body)} }

// TestRequestBodies pins the bytes each method sends, as docs/protocol.md
// spells them: the client encodes protocol's request types, and options at
// their zero value are left out so the service applies its defaults.
func TestRequestBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const p = "fake-bodies"
	f := startFake(t, b.nc, p, map[string]*nats.Msg{
		p + ".push.q":  reply(`{"results":[{"partition":"eu","offset":7,"status":"stored"},{"partition":"default","status":"spooled"}]}`),
		p + ".put.q":   reply(`{"results":[{"partition":"eu","offset":1,"status":"duplicate"}]}`),
		p + ".pop.q":   reply(`{"messages":[{"partition":"eu","offset":3,"id":"i","lease":"l-1","attempt":2,"created_at":"2026-11-30T16:51:37.96706Z","data":{"a":"<é>"}},{"partition":"eu","offset":4,"lease":"l-1","attempt":1,"created_at":"2026-11-30T16:51:37Z","data_b64":"AAEC"}]}`),
		p + ".ack.q":   reply(`{"results":[{"ok":true},{"ok":false,"error":"lease expired"}]}`),
		p + ".renew.q": reply(`{"results":[{"lease":"l-1","ok":true,"expires_at":"2026-11-30T16:52:44.42747Z"}]}`),
		p + ".dlq.q":   reply(`{"dead_letters":[{"dlq_id":"d-1","group":"g","partition":"eu","offset":0,"attempts":2,"reason":"failed","error":"timed out","dead_at":"2026-11-30T16:51:44Z","data_b64":"AAEC"}],"next":"d-1"}`),
		p + ".list":    reply(`{"queues":[{"name":"q","partitions":2,"messages":5,"bytes":36,"groups":1,"pending":3}]}`),
	})
	c := comb.New(b.nc, comb.WithPrefix(p))
	ctx := b.ctx
	body := func(subject string) string {
		m := f.next(t)
		require.Equal(t, subject, m.Subject)
		return string(m.Data)
	}

	res, err := c.Push(ctx, "q", []comb.Message{
		{Partition: "eu", ID: "order-7", Data: []byte(`{"sku":42,"s":"<&>"}`)},
		{Data: []byte{0, 1, 2}},
		{Data: []byte(`{"sku": 42}`)},
	})
	require.Error(t, err, "three messages, two results")
	require.Nil(t, res)
	require.Equal(t, `{"messages":[{"partition":"eu","id":"order-7","data":{"sku":42,"s":"<&>"}},{"data_b64":"AAEC"},{"data_b64":"eyJza3UiOiA0Mn0="}]}`, body(p+".push.q"))

	res, err = c.Push(ctx, "q", []comb.Message{{Partition: "eu", Data: []byte(`1`)}, {Data: []byte(`2`)}})
	require.NoError(t, err)
	require.Equal(t, []comb.PushResult{{Partition: "eu", Offset: 7, Status: comb.StatusStored}, {Partition: "default", Status: comb.StatusSpooled}}, res)
	require.Equal(t, `{"messages":[{"partition":"eu","data":1},{"data":2}]}`, body(p+".push.q"))

	r, err := c.Put(ctx, "q", []byte("raw bytes"), comb.PutOptions{Partition: "eu", ID: "x"})
	require.NoError(t, err)
	require.Equal(t, comb.PushResult{Partition: "eu", Offset: 1, Status: comb.StatusDuplicate}, r)
	put := f.next(t)
	require.Equal(t, "raw bytes", string(put.Data))
	require.Equal(t, "eu", put.Header.Get(protocol.HeaderPartition))
	require.Equal(t, "x", put.Header.Get(protocol.HeaderID))

	ds, err := c.Pop(ctx, "q", comb.PopOptions{})
	require.NoError(t, err)
	require.Equal(t, `{}`, body(p+".pop.q"), "a zero PopOptions sends nothing: the service's defaults apply")
	require.Len(t, ds, 2)
	require.Equal(t, comb.Delivery{Queue: "q", Partition: "eu", Offset: 3, ID: "i", Lease: "l-1", Attempt: 2,
		CreatedAt: time.Date(2026, 11, 30, 16, 51, 37, 967060000, time.UTC), Data: []byte(`{"a":"<é>"}`)}, ds[0])
	require.Equal(t, []byte{0, 1, 2}, ds[1].Data)

	_, err = c.Pop(ctx, "q", comb.PopOptions{Group: "g", Partition: "eu", Max: 10, Partitions: 1,
		Wait: 2 * time.Second, Lease: 30 * time.Second, AutoAck: true, From: comb.FromNew})
	require.NoError(t, err)
	require.Equal(t, `{"group":"g","partition":"eu","max":10,"partitions":1,"wait_ms":2000,"lease_ms":30000,"auto_ack":true,"from":"new"}`, body(p+".pop.q"))

	ar, err := c.Ack(ctx, "q", "g", []comb.Ack{
		{Partition: "eu", Offset: 0, Lease: "l-1"},
		{Offset: 4, Lease: "l-2", Status: comb.AckFailed},
	})
	require.NoError(t, err)
	require.Equal(t, []comb.AckResult{{OK: true}, {OK: false, Error: "lease expired"}}, ar)
	require.EqualError(t, ar[1].Err(), "comb: ack refused: lease expired")
	// Offset 0 is sent: it is required. An empty partition is left out,
	// which the service reads as the default partition, as it did "".
	require.Equal(t, `{"group":"g","acks":[{"partition":"eu","offset":0,"lease":"l-1"},{"offset":4,"lease":"l-2","status":"failed"}]}`, body(p+".ack.q"))
	// Delay and Error go only when set; a Delay of 0 is sent, to override
	// the queue's retry delay.
	_, err = c.Ack(ctx, "q", "", []comb.Ack{
		{Offset: 4, Lease: "l-2", Status: comb.AckFailed, Delay: comb.Duration(1500 * time.Millisecond), Error: "timed out"},
		{Offset: 5, Lease: "l-2", Status: comb.AckRetry, Delay: comb.Duration(0)},
	})
	require.NoError(t, err)
	require.Equal(t, `{"acks":[{"offset":4,"lease":"l-2","status":"failed","delay_ms":1500,"error":"timed out"},`+
		`{"offset":5,"lease":"l-2","status":"retry","delay_ms":0}]}`, body(p+".ack.q"))

	rr, err := c.Renew(ctx, "q", []string{"l-1"}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []comb.RenewResult{{Lease: "l-1", OK: true, ExpiresAt: time.Date(2026, 11, 30, 16, 52, 44, 427470000, time.UTC)}}, rr)
	require.Equal(t, `{"leases":["l-1"],"lease_ms":60000}`, body(p+".renew.q"))

	dls, next, err := c.DeadLetters(ctx, "q", comb.DeadLetterQuery{})
	require.NoError(t, err)
	require.Equal(t, `{}`, body(p+".dlq.q"))
	require.Equal(t, "d-1", next)
	require.Equal(t, []comb.DeadLetter{{DLQID: "d-1", Group: "g", Partition: "eu", Attempts: 2, Reason: "failed", Error: "timed out",
		DeadAt: time.Date(2026, 11, 30, 16, 51, 44, 0, time.UTC), Data: []byte{0, 1, 2}}}, dls)
	_, _, err = c.DeadLetters(ctx, "q", comb.DeadLetterQuery{Group: "g", Limit: 5, After: "d-1"})
	require.NoError(t, err)
	require.Equal(t, `{"group":"g","limit":5,"after":"d-1"}`, body(p+".dlq.q"))
	_, err = c.Replay(ctx, "q", []string{"d-1"})
	require.NoError(t, err)
	require.Equal(t, `{"replay":["d-1"]}`, body(p+".dlq.q"))
	_, err = c.Purge(ctx, "q", []string{"d-2"})
	require.NoError(t, err)
	require.Equal(t, `{"purge":["d-2"]}`, body(p+".dlq.q"))

	_, err = c.Configure(ctx, "q", comb.ConfigPatch{MaxAttempts: comb.Int64(2), DeadLetter: comb.Bool(false)})
	require.NoError(t, err)
	require.Equal(t, `{"max_attempts":2,"dead_letter":false}`, body(p+".configure.q"))
	// Info and List read every page, each as large as the service allows.
	_, err = c.Info(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, `{"limit":10000}`, body(p+".info.q"))
	_, err = c.InfoPage(ctx, "q", comb.PageQuery{})
	require.NoError(t, err)
	require.Equal(t, `{}`, body(p+".info.q"))
	_, err = c.InfoPage(ctx, "q", comb.PageQuery{Limit: 5, After: "AgdkZWZhdWx0"})
	require.NoError(t, err)
	require.Equal(t, `{"limit":5,"after":"AgdkZWZhdWx0"}`, body(p+".info.q"))
	qs, err := c.List(ctx)
	require.NoError(t, err)
	require.Equal(t, []comb.QueueSummary{{Name: "q", Partitions: 2, Messages: 5, Bytes: 36, Groups: 1, Pending: 3}}, qs)
	require.Equal(t, `{"limit":10000}`, body(p+".list"))
	_, _, err = c.ListPage(ctx, comb.PageQuery{After: "orders"})
	require.NoError(t, err)
	require.Equal(t, `{"after":"orders"}`, body(p+".list"))
	require.NoError(t, c.Delete(ctx, "q"))
	require.Equal(t, `{}`, body(p+".delete.q"))
}

// TestErrorReplies checks how the client reads error replies: the code
// from the header, the message from the body when it has one, else from
// the header.
func TestErrorReplies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const p = "fake-errors"
	errReply := func(code, header, body string) *nats.Msg {
		m := reply(body)
		m.Header = nats.Header{}
		m.Header.Set(protocol.HeaderErrorCode, code)
		m.Header.Set(protocol.HeaderError, header)
		return m
	}
	startFake(t, b.nc, p, map[string]*nats.Msg{
		p + ".info.body":   errReply("404", "short", `{"error":{"code":404,"message":"queue \"body\":\nnot found"}}`),
		p + ".info.header": errReply("503", "bridge stopping, retry", ``),
		p + ".info.odd":    errReply("5x", "what", ``),
		p + ".info.empty":  errReply("429", "", `not json`),
	})
	c := comb.New(b.nc, comb.WithPrefix(p))
	for _, tc := range []struct {
		queue    string
		code     int
		message  string
		sentinel error
	}{
		{"body", 404, "queue \"body\":\nnot found", comb.ErrNotFound},
		{"header", 503, "bridge stopping, retry", comb.ErrUnavailable},
		{"odd", 500, `malformed error code "5x": what`, comb.ErrInternal},
		{"empty", 429, "error 429", comb.ErrLimit},
	} {
		_, err := c.Info(b.ctx, tc.queue)
		require.ErrorIs(t, err, tc.sentinel, tc.queue)
		e, ok := protocol.AsError(err)
		require.True(t, ok, tc.queue)
		require.Equal(t, tc.code, e.Code, tc.queue)
		require.Equal(t, tc.message, e.Message, tc.queue)
		require.EqualError(t, err, "comb: info "+tc.queue+": "+e.Message+" ("+strconv.Itoa(tc.code)+")", tc.queue)
	}
}
