package wire

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/handjson"
	"github.com/combmq/comb/internal/wire/wiretest"
	"github.com/combmq/comb/protocol"
)

// The seed corpora below run as ordinary tests; `go test -fuzz FuzzX`
// explores further.

var queueRule = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){0,15}$`)

func FuzzQueueName(f *testing.F) {
	for _, s := range []string{"orders", "billing.invoices", "a.b.c", "", ".", "a..b", "a.", "a b", "a.*", "a.>",
		"é", strings.Repeat("a", 256), strings.Repeat("a.", 16) + "a", "A-Z_0-9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := protocol.ValidateQueue(s)
		want := queueRule.MatchString(s) && len(s) <= protocol.MaxQueueBytes
		require.Equal(t, want, err == nil, "%q: %v", s, err)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok)
			require.Equal(t, 400, we.Code)
		}
		verb, queue, perr := protocol.ParseSubject("comb", "comb.pop."+s)
		if err == nil {
			require.NoError(t, perr)
			require.Equal(t, protocol.VerbPop, verb)
			require.Equal(t, s, queue)
		} else {
			require.Error(t, perr)
		}
	})
}

func FuzzName(f *testing.F) {
	for _, s := range []string{"eu", "", "a b", "日本", "\x00", "a\nb", "\u0085", "\u2028", "\xff", strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if protocol.ValidateName("partition", s) != nil {
			return
		}
		require.True(t, utf8.ValidString(s))
		require.NotEmpty(t, s)
		require.LessOrEqual(t, len(s), protocol.MaxNameBytes)
		for _, r := range s {
			require.False(t, r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0x2028 || r == 0x2029, "%q", s)
		}
		// An accepted name survives a trip through a reply unchanged.
		var back string
		require.NoError(t, json.Unmarshal(handjson.AppendString(nil, s), &back))
		require.Equal(t, s, back)
	})
}

// FuzzDataRoundTrip pushes arbitrary bytes in the member AppendData
// chooses, and checks that the push decoder and a pop reply both give the
// same bytes back.
func FuzzDataRoundTrip(f *testing.F) {
	for _, s := range []string{"", "x", `{"a": 1}`, `[1,2]`, ` 1`, "null", "\x00\xff", `"é"`, "\"\xff\"", "1e999", `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		trimmed := len(bytes.TrimLeft(data, " \t\r\n")) == len(data) && len(bytes.TrimRight(data, " \t\r\n")) == len(data)
		require.Equal(t, utf8.Valid(data) && json.Valid(data) && trimmed, IsJSONData(data), "%q", data)
		member := AppendData(nil, data, domain.EncodingUnknown)
		require.Equal(t, string(member), string(AppendData(nil, data, EncodingOf(data))), "a recorded encoding writes what a check of the bytes would")
		name := len(`"data":`)
		if !IsJSONData(data) {
			name = len(`"data_b64":`)
		}
		require.Equal(t, len(member)-name, DataLen(data, domain.EncodingUnknown))
		require.Equal(t, len(member)-name, DataLen(data, EncodingOf(data)))
		body := append([]byte(`{"messages":[{`), member...)
		body = append(body, "}]}"...)
		msgs, err := DecodePush(body, Limits{})
		require.NoError(t, err, "%s", body)
		require.Len(t, msgs, 1)
		require.Equal(t, string(data), string(msgs[0].Data))
		require.Equal(t, EncodingOf(data), msgs[0].Encoding, "the push records the encoding a reply needs")

		msg := domain.Message{Encoding: msgs[0].Encoding, Partition: "p\"" + string(data), ID: string(data), Lease: "l", Offset: int64(len(data)),
			Attempt: 1, Data: data, CreatedAt: time.Unix(int64(len(data)), int64(len(data))*1000)}
		reply, n := PopReply([]domain.Message{msg}, 0)
		require.Equal(t, 1, n)
		require.Equal(t, len(reply)-len(`{"messages":[]}`)+1, MessageSize(&msg), "MessageSize counts the comma")
		require.Equal(t, len(handjson.AppendString(nil, string(data))), stringLen(string(data)))
		got := decodePopReply(t, reply)
		require.Equal(t, string(data), string(got[0].bytesOf(t)))
		require.Empty(t, got[0].Queue, "a pop of one queue names none")

		// A namespace pop's message names its queue, and MessageSize
		// counts it.
		msg.Queue = "billing.in_" + strings.Repeat("x", len(data)%7)
		reply, n = PopReply([]domain.Message{msg}, 0)
		require.Equal(t, 1, n)
		require.Equal(t, len(reply)-len(`{"messages":[]}`)+1, MessageSize(&msg), "MessageSize counts the queue")
		got = decodePopReply(t, reply)
		require.Equal(t, msg.Queue, got[0].Queue)
		require.Equal(t, string(data), string(got[0].bytesOf(t)))
	})
}

func FuzzDecodePush(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbPush] {
		f.Add([]byte(s))
	}
	lim := Limits{MaxMessageBytes: 64, MaxRequestBytes: 4096}
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, err := DecodePush(body, lim)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Contains(t, []int{400, 413}, we.Code)
			require.NotEmpty(t, we.Message)
			return
		}
		require.NotEmpty(t, msgs)
		for _, m := range msgs {
			require.NoError(t, protocol.ValidateName("partition", m.Partition))
			require.LessOrEqual(t, len(m.ID), protocol.MaxIDBytes)
			require.LessOrEqual(t, len(m.Data), lim.MaxMessageBytes)
		}
		// Every decoded message's bytes survive a pop reply.
		out := make([]domain.Message, len(msgs))
		for i, m := range msgs {
			out[i] = domain.Message{Partition: m.Partition, ID: m.ID, Data: m.Data, Encoding: m.Encoding}
		}
		reply, n := PopReply(out, 0)
		require.Equal(t, len(out), n)
		for i, m := range decodePopReply(t, reply) {
			require.Equal(t, string(msgs[i].Data), string(m.bytesOf(t)))
			require.Equal(t, msgs[i].Partition, m.Partition)
			require.Equal(t, msgs[i].ID, m.ID)
		}
		// And a push written from the decoded messages decodes to them again.
		re := []byte(`{"messages":[`)
		for i, m := range msgs {
			if i > 0 {
				re = append(re, ',')
			}
			re = append(re, `{"partition":`...)
			re = handjson.AppendString(re, m.Partition)
			re = append(re, `,"id":`...)
			re = handjson.AppendString(re, m.ID)
			re = append(re, ',')
			re = AppendData(re, m.Data, m.Encoding)
			re = append(re, '}')
		}
		re = append(re, "]}"...)
		again, err := DecodePush(re, Limits{})
		require.NoError(t, err)
		require.Equal(t, len(msgs), len(again))
		for i := range msgs {
			require.Equal(t, string(msgs[i].Data), string(again[i].Data))
		}
	})
}

func FuzzDecodePop(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbPop] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodePop(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Contains(t, []int{400, 413}, we.Code)
			return
		}
		require.LessOrEqual(t, len(p.Acks), protocol.MaxAcks)
		for _, a := range p.Acks {
			requireValidAck(t, a)
		}
		r := p.Params
		require.NoError(t, protocol.ValidateName("group", r.Group))
		if r.Partition != "" {
			require.NoError(t, protocol.ValidateName("partition", r.Partition))
			require.Equal(t, 1, r.Partitions)
		}
		require.True(t, r.Max >= 1 && r.Max <= protocol.MaxPopMessages)
		require.True(t, r.Partitions >= 1 && r.Partitions <= protocol.MaxPopPartitions)
		require.True(t, p.Wait >= 0 && p.Wait <= protocol.MaxWaitMS*time.Millisecond)
		require.True(t, r.LeaseMS == 0 || (r.LeaseMS >= protocol.MinLeaseMS && r.LeaseMS <= protocol.MaxLeaseMS))
		require.Contains(t, []domain.StartKind{domain.StartAll, domain.StartNew, domain.StartTime}, r.From.Kind)
	})
}

// FuzzDecodeNamespacePop: a namespace pop takes what a pop takes, but
// never a partition; what it refuses is a 400.
func FuzzDecodeNamespacePop(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbNamespacePop] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeNamespacePop(body)
		single, singleErr := DecodePop(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, 400, we.Code)
			require.True(t, singleErr != nil || single.Params.Partition != "" || len(single.Acks) > 0,
				"refused only what a pop refuses, a partition or acks")
			return
		}
		require.Empty(t, p.Acks)
		require.NoError(t, singleErr)
		require.Empty(t, p.Params.Partition)
		require.Equal(t, single.Params.Group, p.Params.Group)
		require.Equal(t, single.Params.Max, p.Params.Max)
		require.Equal(t, single.Params.Partitions, p.Params.Partitions)
		require.Equal(t, single.Wait, p.Wait)
	})
}

func FuzzDecodeAck(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbAck] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		group, acks, err := DecodeAck(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Contains(t, []int{400, 413}, we.Code)
			return
		}
		require.NoError(t, protocol.ValidateName("group", group))
		require.NotEmpty(t, acks)
		for _, a := range acks {
			requireValidAck(t, a)
		}
		// A pop that carries the same acks decodes them alike.
		var req struct {
			Acks json.RawMessage `json:"acks"`
		}
		require.NoError(t, json.Unmarshal(body, &req))
		g, err := json.Marshal(group)
		require.NoError(t, err)
		p, err := DecodePop([]byte(`{"group":` + string(g) + `,"acks":` + string(req.Acks) + `}`))
		require.NoError(t, err)
		require.Equal(t, acks, p.Acks)
	})
}

// requireValidAck checks what DecodeAck and DecodePop promise of an ack.
func requireValidAck(t *testing.T, a domain.Ack) {
	require.Contains(t, []domain.AckStatus{domain.AckCompleted, domain.AckRetry, domain.AckFailed, domain.AckDead}, a.Status)
	require.GreaterOrEqual(t, a.Offset, int64(0))
	require.NotEmpty(t, a.Lease)
	require.NoError(t, protocol.ValidateName("partition", a.Partition))
	if a.DelayMS != nil {
		require.Contains(t, []domain.AckStatus{domain.AckRetry, domain.AckFailed}, a.Status)
		require.True(t, *a.DelayMS >= 0 && *a.DelayMS <= protocol.MaxDelayMS, "delay_ms %d", *a.DelayMS)
	}
	if a.Error != "" {
		require.Contains(t, []domain.AckStatus{domain.AckFailed, domain.AckDead}, a.Status)
		require.NoError(t, protocol.ValidateText("error", a.Error, protocol.MaxAckErrorBytes))
	}
}

func FuzzDecodeConfigure(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbConfigure] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeConfigure(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, 400, we.Code)
			return
		}
		if p.LeaseMS != nil {
			require.True(t, *p.LeaseMS >= protocol.MinLeaseMS && *p.LeaseMS <= protocol.MaxLeaseMS)
		}
		if p.MaxAttempts != nil {
			require.True(t, *p.MaxAttempts >= 1)
		}
		for _, v := range []*int64{p.DedupWindowS, p.CompletedRetentionS, p.MaxAgeS, p.DelayMS, p.MaxMessages, p.MaxBytes} {
			if v != nil {
				require.GreaterOrEqual(t, *v, int64(0))
			}
		}
	})
}

func FuzzDecodeDLQ(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbDLQ] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := DecodeDLQ(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Contains(t, []int{400, 413}, we.Code)
			return
		}
		switch d.Op {
		case DLQList:
			require.True(t, d.Params.Limit >= 1 && d.Params.Limit <= protocol.MaxDLQLimit)
		case DLQReplay, DLQPurge:
			require.NotEmpty(t, d.IDs)
		default:
			t.Fatalf("op %q", d.Op)
		}
	})
}

func FuzzDecodeInfo(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbInfo] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeInfo(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, 400, we.Code)
			return
		}
		require.True(t, p.Limit >= 1 && p.Limit <= protocol.MaxInfoLimit)
		for _, at := range []domain.PageAt{p.Partitions, p.Groups} {
			require.LessOrEqual(t, len(at.After), protocol.MaxNameBytes)
			require.False(t, at.Done && at.After != "")
		}
	})
}

func FuzzDecodeList(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbList] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeList(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, 400, we.Code)
			return
		}
		require.True(t, p.Limit >= 1 && p.Limit <= protocol.MaxListLimit)
		require.LessOrEqual(t, len(p.After), protocol.MaxQueueBytes)
	})
}

func FuzzDecodeSeek(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbSeek] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := DecodeSeek(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, 400, we.Code)
			return
		}
		// Whatever decodes names a valid group and a place to go.
		require.NoError(t, protocol.ValidateName("group", s.Group))
		if s.Partition != "" {
			require.NoError(t, protocol.ValidateName("partition", s.Partition))
		}
		require.Contains(t, []domain.StartKind{domain.StartAll, domain.StartNew, domain.StartTime}, s.To.Kind)
	})
}

func FuzzDecodeGroups(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbGroups] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		g, err := DecodeGroups(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, 400, we.Code)
			return
		}
		// Whatever decodes is a listing or names a valid group.
		if g != "" {
			require.NoError(t, protocol.ValidateName("delete", g))
		}
	})
}

func FuzzDecodePeek(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbPeek] {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodePeek(body)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, 400, we.Code)
			return
		}
		// Whatever decodes names a partition a push accepts and a bounded page.
		require.NoError(t, protocol.ValidateText("partition", p.Partition, protocol.MaxNameBytes))
		if p.ID != "" {
			require.NoError(t, protocol.ValidateText("id", p.ID, protocol.MaxIDBytes))
			require.Equal(t, 1, p.Limit)
			require.Zero(t, p.From)
		}
		require.GreaterOrEqual(t, p.From, int64(0))
		require.GreaterOrEqual(t, p.Limit, 1)
		require.LessOrEqual(t, p.Limit, protocol.MaxPeekLimit)
	})
}

// FuzzTimeLen holds timeLen to the formatting it stands for.
func FuzzTimeLen(f *testing.F) {
	for _, s := range []int64{0, 1764806400, -62135596800, 253402300799, 253402300800, -62135596801, 1 << 40, -(1 << 40)} {
		f.Add(s, int64(0))
		f.Add(s, int64(123000000))
		f.Add(s, int64(999999999))
		f.Add(s, int64(1))
	}
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		tm := time.Unix(sec, nsec%1e9).In(time.FixedZone("x", int(nsec%86400)))
		require.Equal(t, len(tm.UTC().AppendFormat(nil, time.RFC3339Nano)), timeLen(tm), "%v", tm)
	})
}
