package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire/wiretest"
	"github.com/combmq/comb/protocol"
)

// replyMessage reads a pop reply's message the way any client would.
type replyMessage struct {
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	Queue     string          `json:"queue"`
	ID        string          `json:"id"`
	Lease     string          `json:"lease"`
	Attempt   int             `json:"attempt"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
	DataB64   *string         `json:"data_b64"`
}

// bytesOf returns the message bytes a client reads from data or data_b64.
func (m replyMessage) bytesOf(t testing.TB) []byte {
	if m.DataB64 != nil {
		require.Nil(t, m.Data, "both data and data_b64")
		b, err := base64.StdEncoding.DecodeString(*m.DataB64)
		require.NoError(t, err)
		return b
	}
	require.NotNil(t, m.Data, "neither data nor data_b64")
	return m.Data
}

func decodePopReply(t testing.TB, b []byte) []replyMessage {
	t.Helper()
	require.True(t, json.Valid(b), "invalid JSON: %q", b)
	var r struct {
		Messages []replyMessage `json:"messages"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&r))
	require.NotNil(t, r.Messages, "messages must be [] not null")
	return r.Messages
}

func TestIsJSONData(t *testing.T) {
	t.Parallel()
	yes := []string{`{}`, `{"a": 1}`, `[1, 2]`, `"s"`, `1`, `-1.5e3`, `true`, `null`, `"caf\u00e9"`, `"é"`}
	no := []string{``, ` 1`, `1 `, "{}\n", `{`, `nope`, `01`, "\"\xff\"", `1 2`, `'s'`, "\x00"}
	for _, s := range yes {
		require.True(t, IsJSONData([]byte(s)), s)
	}
	for _, s := range no {
		require.False(t, IsJSONData([]byte(s)), "%q", s)
	}
}

func TestPopReply(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.FixedZone("x", 3600))
	msgs := []domain.Message{
		{Partition: "eu", Offset: 17, ID: "order-7", Lease: "l-9f2c", Attempt: 1, CreatedAt: created, Data: []byte(`{"sku": 42}`)},
		{Partition: "default", Offset: 0, Attempt: 2, CreatedAt: created, Data: []byte{0, 1, 2}},
		{Partition: "p\"q", Offset: 1, Attempt: 1, CreatedAt: created, Data: []byte{}},
		{Partition: "p", Offset: 2, Attempt: 1, CreatedAt: created, Data: []byte(" 1")},
	}
	b, n := PopReply(msgs, 0)
	require.Equal(t, 4, n)
	require.Equal(t, `{"messages":[{"partition":"eu","offset":17,"id":"order-7","lease":"l-9f2c","attempt":1,`+
		`"created_at":"2026-11-30T09:00:00.123456Z","data":{"sku": 42}},`+
		`{"partition":"default","offset":0,"attempt":2,"created_at":"2026-11-30T09:00:00.123456Z","data_b64":"AAEC"},`+
		`{"partition":"p\"q","offset":1,"attempt":1,"created_at":"2026-11-30T09:00:00.123456Z","data_b64":""},`+
		`{"partition":"p","offset":2,"attempt":1,"created_at":"2026-11-30T09:00:00.123456Z","data_b64":"IDE="}]}`, string(b))
	got := decodePopReply(t, b)
	for i, m := range got {
		require.Equal(t, msgs[i].Data, m.bytesOf(t))
		require.Equal(t, msgs[i].Partition, m.Partition)
		require.True(t, msgs[i].CreatedAt.Equal(m.CreatedAt))
	}

	b, n = PopReply(nil, 0)
	require.Zero(t, n)
	require.Equal(t, `{"messages":[]}`, string(b))

	// A limit keeps a prefix that fits.
	big := make([]domain.Message, 10)
	for i := range big {
		big[i] = domain.Message{Partition: "p", Offset: int64(i), Data: []byte(strings.Repeat("x", 100))}
	}
	full, _ := PopReply(big, 0)
	for _, limit := range []int{len(full), len(full) - 1, 500, 200, 20} {
		b, n := PopReply(big, limit)
		require.LessOrEqual(t, len(b), limit)
		got := decodePopReply(t, b)
		require.Len(t, got, n)
		if limit == len(full) {
			require.Equal(t, 10, n)
		} else {
			require.Less(t, n, 10)
		}
		for i, m := range got {
			require.EqualValues(t, i, m.Offset)
		}
	}
	_, n = PopReply(big, 20)
	require.Zero(t, n)
}

func TestReplies(t *testing.T) {
	t.Parallel()
	require.Equal(t, `{"results":[{"partition":"eu","offset":17,"status":"stored"},{"partition":"default","offset":4,"status":"duplicate"}]}`,
		string(PushReply([]domain.PushResult{{Partition: "eu", Offset: 17, Status: domain.Stored}, {Partition: "default", Offset: 4, Status: domain.Duplicate}})))
	require.Equal(t, `{"results":[{"partition":"eu","status":"spooled"}]}`,
		string(PushReply([]domain.PushResult{{Partition: "eu", Status: domain.Spooled}})), "a spooled message has no offset")
	require.Equal(t, `{"results":[{"ok":true},{"ok":false,"error":"lease expired"}]}`,
		string(AckReply([]domain.AckResult{{OK: true}, {Error: "lease expired"}})))
	exp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, `{"results":[{"lease":"l-1","ok":true,"expires_at":"2026-01-02T03:04:05Z"},{"lease":"l-2","ok":false,"error":"unknown lease"}]}`,
		string(RenewReply([]domain.RenewResult{{Lease: "l-1", OK: true, ExpiresAt: exp}, {Lease: "l-2", Error: "unknown lease"}})))
	dl := domain.DeadLetter{DLQID: "d-31", Group: "billing", Partition: "eu", Offset: 17, ID: "order-7",
		Attempts: 3, Reason: "failed", DeadAt: exp, Data: []byte(`{"sku":42}`)}
	b, n := DLQReply([]domain.DeadLetter{dl}, "d-31", 0)
	require.Equal(t, 1, n)
	require.Equal(t, `{"dead_letters":[{"dlq_id":"d-31","group":"billing","partition":"eu","offset":17,"id":"order-7",`+
		`"attempts":3,"reason":"failed","dead_at":"2026-01-02T03:04:05Z","data":{"sku":42}}],"next":"d-31"}`, string(b))
	// An ack's error text follows the reason, and reads back as protocol's.
	withErr := dl
	withErr.Error = `upstream said "503" \ é`
	b, _ = DLQReply([]domain.DeadLetter{withErr}, "", 0)
	require.Contains(t, string(b), `"reason":"failed","error":"upstream said \"503\" \\ é","dead_at"`)
	var rep protocol.DLQReply
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, withErr.Error, rep.DeadLetters[0].Error)
	b, _ = DLQReply(nil, "", 0)
	require.Equal(t, `{"dead_letters":[],"next":""}`, string(b))
	// Over the limit: a prefix, and next points after it.
	dls := make([]domain.DeadLetter, 20)
	for i := range dls {
		dls[i] = dl
		dls[i].DLQID = "d-" + strconv.Itoa(i+1)
	}
	b, n = DLQReply(dls, "d-20", 1000)
	require.LessOrEqual(t, len(b), 1000)
	require.Greater(t, n, 0)
	require.Less(t, n, 20)
	var page struct {
		DeadLetters []json.RawMessage `json:"dead_letters"`
		Next        string            `json:"next"`
	}
	require.NoError(t, json.Unmarshal(b, &page))
	require.Len(t, page.DeadLetters, n)
	require.Equal(t, "d-"+strconv.Itoa(n), page.Next)
	require.Equal(t, `{"done":3}`, string(DoneReply(3)))
	list, _ := ListReply(domain.QueueList{}, 0)
	require.Equal(t, `{"queues":[],"next":""}`, string(list))
	info, _ := InfoReply(domain.Info{Name: "q", Config: domain.DefaultQueueConfig()}, domain.InfoParams{Limit: 1}, 0)
	require.Contains(t, string(info), `"partitions":[],"groups":[],"next":""`)
	require.Contains(t, string(ConfigReply(domain.DefaultQueueConfig())), `"lease_ms":30000`)
}

// BenchmarkPopReply encodes a reply of 1,000 messages from segments of
// 100, each segment's messages sharing its time, as a pop's do.
func BenchmarkPopReply(b *testing.B) {
	msgs := make([]domain.Message, 1000)
	created := time.Now()
	for i := range msgs {
		msgs[i] = domain.Message{Partition: "p-1", Offset: int64(i), ID: "id", Lease: "l-123456", Attempt: 1,
			CreatedAt: created.Add(time.Duration(i/100) * time.Millisecond), Data: []byte(`{"sku":42,"name":"a widget","tags":["x","y"],"price":12.5}`)}
	}
	b.ReportAllocs()
	for b.Loop() {
		PopReply(msgs, 0)
	}
}

func BenchmarkDecodePush(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"partition":"p-1","data":{"sku":42,"name":"a widget","tags":["x","y"],"price":12.5}}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePush(body, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePushStrings is the loader's shape: 100 messages whose data
// is a 256-byte JSON string.
func BenchmarkDecodePushStrings(b *testing.B) {
	body := wiretest.ReferencePush(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePush(body, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePushHeaders is BenchmarkDecodePushStrings with the
// loader's -headers 256: one header per message whose stored form is 256
// bytes, and a traceparent.
func BenchmarkDecodePushHeaders(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"partition":"p-` + strconv.Itoa(i%200) + `","headers":{"X-Load":["` + strings.Repeat("h", 256-15) +
			`"],"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},"data":"` + strings.Repeat("abcdefgh", 31) + `1234567"}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePush(body, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePushParallel is BenchmarkDecodePushStrings on every
// core at once: the decoder shares nothing, so with -cpu 1,2,4 its
// throughput should grow with the cores the machine has.
func BenchmarkDecodePushParallel(b *testing.B) {
	body := wiretest.ReferencePush(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := DecodePush(body, DefaultLimits()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPopReplyParallel encodes pop replies of the reference shape
// (400 messages of 256 bytes) on every core at once, as the bridge's pop
// workers do: with -cpu 1,2,4 its throughput should grow with the cores
// the machine has. "alloc" gives every reply a new buffer, "reused" one
// an earlier reply used, as the bridge does.
func BenchmarkPopReplyParallel(b *testing.B) {
	msgs := make([]domain.Message, 400)
	data := []byte(`"` + strings.Repeat("abcdefgh", 31) + `1234567"`)
	for i := range msgs {
		msgs[i] = domain.Message{Partition: "p-" + strconv.Itoa(i%200), Offset: int64(i), Lease: "l-123456", Attempt: 1,
			CreatedAt: time.Now(), Data: data}
	}
	reply, _ := PopReply(msgs, 0)
	b.Run("alloc", func(b *testing.B) {
		b.SetBytes(int64(len(reply)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				PopReply(msgs, 0)
			}
		})
	})
	// reused is the bridge's way: each pop worker's reply goes into a
	// buffer an earlier reply used.
	b.Run("reused", func(b *testing.B) {
		b.SetBytes(int64(len(reply)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var buf []byte
			for pb.Next() {
				buf, _ = AppendPopReply(buf[:0], msgs, 0)
			}
		})
	})
}

// A reply writes each message's created_at as AppendTime does, whether it
// repeats the message before's time, an earlier one's, an equal instant in
// another zone, or none.
func TestPopReplyTimes(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 18, 0, 0, 5, time.UTC)
	times := []time.Time{t0, t0, t0.Add(time.Millisecond), t0, t0.In(time.FixedZone("x", 3600)), {}, {}, t0}
	msgs := make([]domain.Message, len(times))
	for i, c := range times {
		msgs[i] = domain.Message{Partition: "p", Offset: int64(i), Attempt: 1, CreatedAt: c, Data: []byte("1")}
	}
	b, n := PopReply(msgs, 0)
	require.Equal(t, len(msgs), n)
	for i, part := range bytes.Split(b, []byte(`"created_at":`))[1:] {
		require.True(t, bytes.HasPrefix(part, AppendTime(nil, times[i])), "message %d: %s", i, part)
	}
	for i, m := range decodePopReply(t, b) {
		require.True(t, m.CreatedAt.Equal(times[i]), "message %d", i)
	}
}

func FuzzPopReplyTimes(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), uint8(3))
	f.Add(int64(1_700_000_000), int64(999_999_999), int64(1), uint8(0xa5))
	f.Fuzz(func(t *testing.T, sec, nsec, step int64, pattern uint8) {
		t0 := time.Unix(sec%(1<<33), nsec%1_000_000_000)
		var want []byte
		msgs := make([]domain.Message, 8)
		for i := range msgs {
			c := t0
			if pattern&(1<<i) != 0 {
				c = t0.Add(time.Duration(step % (1 << 40)))
			}
			msgs[i] = domain.Message{Partition: "p", Offset: int64(i), Attempt: 1, CreatedAt: c, Data: []byte("1")}
			if i > 0 {
				want = append(want, ',')
			}
			want = appendMessage(want, &msgs[i], &timeSpan{})
		}
		got, _ := PopReply(msgs, 0)
		require.Equal(t, `{"messages":[`+string(want)+`]}`, string(got))
	})
}

// BenchmarkMessageSize is the store's sizing of a message it hands to a
// waiting pop, done for every message of every offer.
//
//	go test ./internal/wire -run '^$' -bench MessageSize
func BenchmarkMessageSize(b *testing.B) {
	m := domain.Message{Partition: "p3", Offset: math.MaxInt64, Lease: "l-7-0123456789abcdef", Attempt: 1,
		CreatedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), Data: []byte(`"` + strings.Repeat("x", 254) + `"`), Encoding: domain.EncodingJSON}
	n := 0
	for b.Loop() {
		n += MessageSize(&m)
	}
	if n == 0 {
		b.Fatal(n)
	}
}
