package comb

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// brokerReplies are replies as the broker writes them (internal/wire's
// encoders), for the hot verbs.
func brokerReplies(t testing.TB) map[string][][]byte {
	at := time.Date(2026, 12, 4, 1, 2, 3, 456789000, time.UTC)
	msgs := []domain.Message{
		{Partition: "p", Offset: 41, Lease: "l-7-0123456789abcdef", Attempt: 1, CreatedAt: at, Data: make([]byte, 256), Encoding: domain.EncodingBinary},
		{Partition: "p", Offset: 42, ID: "id-1", Lease: "l-7-0123456789abcdef", Attempt: 3, CreatedAt: at, Data: []byte(`{"a":[1,"x"]}`), Encoding: domain.EncodingJSON},
		{Partition: "é \"q\"", Offset: 0, Attempt: 1, CreatedAt: at, Data: []byte(`"s"`), Encoding: domain.EncodingJSON,
			Headers: domain.Headers(`{"Trace":["a","b"],"X-One":["1"]}`)},
		{Queue: "billing.invoices", Partition: "p", Offset: 7, Lease: "l-1-00", Attempt: 2, CreatedAt: at, Data: []byte{}, Encoding: domain.EncodingBinary},
	}
	var pops [][]byte
	for i := range msgs {
		b, n := wire.PopReply(msgs[:i+1], 1<<20)
		require.Equal(t, i+1, n)
		pops = append(pops, b)
	}
	empty, _ := wire.PopReply(nil, 1<<20)
	pops = append(pops, empty)
	return map[string][][]byte{
		"pop": pops,
		"ack": {
			wire.AckReply([]domain.AckResult{{OK: true}}),
			wire.AckReply([]domain.AckResult{{OK: true}, {OK: false, Error: "lease expired"}}),
			wire.AckReply(nil),
		},
		"push": {
			wire.PushReply([]domain.PushResult{{Partition: "p", Offset: 41, Status: domain.Stored}}),
			wire.PushReply([]domain.PushResult{{Partition: "p", Offset: 1, Status: domain.Stored}, {Partition: "p", Status: domain.Spooled}, {Partition: "q", Offset: 3, Status: domain.Duplicate}}),
		},
		"txn": {
			wire.TxnReply(domain.TxnResult{Acks: []domain.AckResult{{OK: true}}, Push: [][]domain.PushResult{{{Partition: "p", Offset: 9, Status: domain.Stored}}}}),
			wire.TxnReply(domain.TxnResult{Push: [][]domain.PushResult{{{Partition: "p", Offset: 9, Status: domain.Stored}}, {}}}),
		},
	}
}

// The hand-written readers must take the broker's replies themselves, not
// leave them to encoding/json: otherwise they would be correct (the
// fallback is) and useless.
func TestReadersTakeTheBrokersReplies(t *testing.T) {
	for verb, bodies := range brokerReplies(t) {
		for _, b := range bodies {
			var err error
			switch verb {
			case "pop":
				_, err = scanPop(b, nil)
			case "ack":
				_, err = scanAck(b)
			case "push":
				_, err = scanPush(b)
			case "txn":
				_, err = scanTxn(b)
			}
			require.NoError(t, err, "%s %s", verb, b)
			requireSameReplies(t, b)
		}
	}
}

func TestDecodePopReply(t *testing.T) {
	b, _ := wire.PopReply([]domain.Message{
		{Partition: "p", Offset: 41, Lease: "l-7-0123", Attempt: 2, CreatedAt: time.Unix(1, 0).UTC(), Data: []byte{0, 1, 2}, Encoding: domain.EncodingBinary,
			Headers: domain.Headers(`{"K":["v"]}`)},
	}, 1<<20)
	got, err := DecodePopReply(b, "q", nil)
	require.NoError(t, err)
	require.Equal(t, []Delivery{{Queue: "q", Partition: "p", Offset: 41, Lease: "l-7-0123", Attempt: 2, CreatedAt: time.Unix(1, 0).UTC(),
		Data: []byte{0, 1, 2}, Headers: map[string][]string{"K": {"v"}}}}, got)

	// A namespace pop's messages name their queue, or are refused.
	_, err = DecodePopReply(b, "", nil)
	require.ErrorContains(t, err, "message p/41 names no queue")

	// What the fast reader leaves to encoding/json gets its answers:
	// a key in other case, a null list, a syntax error, bad base64.
	got, err = DecodePopReply([]byte(`{"Messages":[{"partition":"p","offset":1,"data":"x"}]}`), "q", []Delivery{{Offset: 9}})
	require.NoError(t, err)
	require.Equal(t, []Delivery{{Offset: 9}, {Queue: "q", Partition: "p", Offset: 1, Data: []byte(`"x"`)}}, got)
	got, err = DecodePopReply([]byte(`{"next":"x"}`), "q", []Delivery{{Offset: 9}})
	require.NoError(t, err)
	require.Equal(t, []Delivery{{Offset: 9}}, got, "what out held is kept")
	got, err = DecodePopReply([]byte(`{"messages":null}`), "q", nil)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = DecodePopReply([]byte(`{"messages":[{"offset":1.5}]}`), "q", nil)
	require.ErrorContains(t, err, "decode reply: json: cannot unmarshal number 1.5")
	_, err = DecodePopReply([]byte(`{"messages":[{"partition":"p","offset":3,"data_b64":"!!"}]}`), "q", nil)
	require.ErrorContains(t, err, "message p/3: data_b64: illegal base64")
	_, err = DecodePopReply([]byte(`{"messages":[]`), "q", nil)
	require.ErrorContains(t, err, "decode reply: unexpected end of JSON input")
}

// FuzzRepliesMatchEncodingJSON holds the hand-written reply readers to the
// reference decoders (encoding/json into the protocol's types): where a
// reader takes a body, both give the same values; a body it leaves goes to
// the reference, so the Decode functions always answer as it does.
func FuzzRepliesMatchEncodingJSON(f *testing.F) {
	for _, bodies := range brokerReplies(f) {
		for _, b := range bodies {
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"messages":[{"partition":"p","offset":1,"data":null,"data_b64":null}]}`,
		`{"messages":[{"partition":"p","partition":"q","headers":{"a":"x"},"headers":{"b":["y",null]}}]}`,
		`{"messages":[],"messages":[{"offset":2}]}`,
		`{"messages":[{"created_at":null,"attempt":-0,"queue":"\ud800"}]} `,
		`{"messages":[{"PARTITION":"p","ſd":1}]}`,
		`{"results":[{"ok":true,"ok":null}]}`,
		`{"results":[{"ok":1}]}`,
		`{"acks":[],"push":[{"results":[]},{}]}`,
		`{"results":[{"partition":"p","offset":99999999999999999999}]}`,
		`null`, `[]`, `{}`, ` {"messages":[]} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		requireSameReplies(t, body)
	})
}

// requireSameReplies checks every reader against its reference on body.
func requireSameReplies(t *testing.T, body []byte) {
	t.Helper()
	if got, err := scanPop(body, nil); err == nil {
		want, err := decodePopJSON(body, nil)
		require.NoError(t, err, "pop %q", body)
		require.Equal(t, len(want), len(got), "pop %q", body)
		if len(want) > 0 {
			require.Equal(t, want, got, "pop %q", body)
		}
	} else {
		require.ErrorIs(t, err, errSlow)
	}
	_, fastErr := DecodePopReply(body, "q", nil)
	_, refErr := decodePopJSON(body, nil)
	require.Equal(t, refErr == nil, fastErr == nil, "pop %q: %v, %v", body, fastErr, refErr)

	if got, err := scanAck(body); err == nil {
		want, err := decodeAckJSON(body)
		require.NoError(t, err, "ack %q", body)
		require.Equal(t, want, got, "ack %q", body)
	} else {
		require.ErrorIs(t, err, errSlow)
	}
	if got, err := scanPush(body); err == nil {
		want, err := decodePushJSON(body)
		require.NoError(t, err, "push %q", body)
		require.Equal(t, want, got, "push %q", body)
	} else {
		require.ErrorIs(t, err, errSlow)
	}
	if got, err := scanTxn(body); err == nil {
		want, err := decodeTxnJSON(body)
		require.NoError(t, err, "txn %q", body)
		require.Equal(t, want, got, "txn %q", body)
	} else {
		require.ErrorIs(t, err, errSlow)
	}
}

// FuzzRequestsMatchEncodingJSON holds the hand-written pop and ack
// request bodies to encoding/json's encoding of the protocol's types:
// the same value when read back, and the same bytes where no string needs
// an escape that the two write differently.
func FuzzRequestsMatchEncodingJSON(f *testing.F) {
	f.Add("g", "p", 10, 4, int64(1000), int64(30000), true, "new", int64(41), "l-7-0123", "failed", "boom", int64(250), true)
	f.Add("", "", 0, 0, int64(0), int64(0), false, "", int64(0), "", "", "", int64(0), false)
	f.Add("é\x00\"<&>\u2028", "\xff", -1, 1, int64(-5), int64(1), false, "2026-12-04T00:00:00Z", int64(-1), "\\", "retry", "\n", int64(0), true)
	f.Fuzz(func(t *testing.T, group, partition string, max, parts int, waitMS, leaseMS int64, auto bool, from string,
		offset int64, lease, status, errText string, delayMS int64, hasDelay bool) {
		o := PopOptions{Group: group, Partition: partition, Max: max, Partitions: parts,
			Wait: time.Duration(waitMS) * time.Millisecond, Lease: time.Duration(leaseMS) * time.Millisecond, AutoAck: auto, From: from}
		ref, err := encodeBody(protocol.PopRequest{Group: o.Group, Partition: o.Partition, Max: optInt(o.Max), Partitions: optInt(o.Partitions),
			WaitMS: durationMS(o.Wait), LeaseMS: durationMS(o.Lease), AutoAck: o.AutoAck, From: o.From})
		require.NoError(t, err)
		requireSameJSON[protocol.PopRequest](t, ref, appendPopRequest(nil, o, nil), plain(group, partition, from))

		a := Ack{Partition: partition, Offset: offset, Lease: lease, Status: status, Error: errText}
		if hasDelay {
			d := time.Duration(delayMS) * time.Millisecond
			a.Delay = &d
		}
		acks := []Ack{a, {Offset: offset + 1, Lease: lease}}
		wireAcks := []protocol.Ack{wireAck(acks[0]), wireAck(acks[1])}
		ref, err = encodeBody(protocol.AckRequest{Group: group, Acks: wireAcks})
		require.NoError(t, err)
		requireSameJSON[protocol.AckRequest](t, ref, appendAckRequest(nil, group, acks), plain(group, partition, lease, status, errText))

		// A pop that carries the acks (AckAndPop).
		ref, err = encodeBody(protocol.PopRequest{Group: o.Group, Partition: o.Partition, Max: optInt(o.Max), Partitions: optInt(o.Partitions),
			WaitMS: durationMS(o.Wait), LeaseMS: durationMS(o.Lease), AutoAck: o.AutoAck, From: o.From, Acks: wireAcks})
		require.NoError(t, err)
		requireSameJSON[protocol.PopRequest](t, ref, appendPopRequest(nil, o, acks), plain(group, partition, from, lease, status, errText))
	})
}

func requireSameJSON[T any](t *testing.T, ref, got []byte, bytesToo bool) {
	t.Helper()
	require.True(t, json.Valid(got), "%s", got)
	var want, have T
	require.NoError(t, json.Unmarshal(ref, &want))
	dec := json.NewDecoder(bytes.NewReader(got))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&have), "%s", got)
	require.Equal(t, want, have, "%s against %s", got, ref)
	if bytesToo {
		require.Equal(t, string(ref), string(got))
	}
}

// plain reports whether encoding/json and handjson.AppendString write
// every one of ss alike: valid UTF-8 without control characters or the
// line and paragraph separators, which they escape differently.
func plain(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) || strings.ContainsAny(s, "\u2028\u2029") {
			return false
		}
		for _, c := range []byte(s) {
			if c < 0x20 {
				return false
			}
		}
	}
	return true
}

// BenchmarkDecodePopReply times the pop reply's hand-written reader
// ("hand") against the reference decoder ("json") on a reply the broker
// writes: 1 and 100 messages of a 256-byte JSON string each.
//
//	go test ./clients/go -run '^$' -bench DecodePopReply -benchmem
func BenchmarkDecodePopReply(b *testing.B) {
	data := []byte(`"` + strings.Repeat("x", 254) + `"`)
	at := time.Date(2026, 12, 4, 1, 2, 3, 456789000, time.UTC)
	for _, n := range []int{1, 100} {
		msgs := make([]domain.Message, n)
		for i := range msgs {
			msgs[i] = domain.Message{Partition: "p3", Offset: int64(i), Lease: "l-7-0123456789abcdef", Attempt: 1, CreatedAt: at, Data: data, Encoding: domain.EncodingJSON}
		}
		reply, _ := wire.PopReply(msgs, 1<<20)
		for _, d := range []struct {
			name   string
			decode func([]byte, []Delivery) ([]Delivery, error)
		}{{"hand", scanPop}, {"json", decodePopJSON}} {
			b.Run(strconv.Itoa(n)+"/"+d.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(reply)))
				for b.Loop() {
					if got, err := d.decode(reply, nil); err != nil || len(got) != n {
						b.Fatal(err, len(got))
					}
				}
			})
		}
	}
}

// FuzzPushRequestMatchesEncodingJSON holds the hand-written push body to
// encoding/json's encoding of the messages' protocol forms.
func FuzzPushRequestMatchesEncodingJSON(f *testing.F) {
	f.Add("p", "id-1", []byte(`{"sku":42}`), "Trace", "a", "b", int64(0), int64(0))
	f.Add("", "", []byte(`{"sku": 42}`), "", "", "", int64(250), int64(1764806400123456789))
	f.Add("é\x00", "\xff", []byte("\xff\xfe"), "K\u2028", "\x01", "", int64(-1), int64(-5))
	f.Add("p", "", []byte{}, "a", "", "", int64(1), int64(1))
	f.Add("p", "", []byte(`"a b"`), "z", "y", "x", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, partition, id string, data []byte, hk, hv1, hv2 string, delayMS, notBefore int64) {
		m := Message{Partition: partition, ID: id, Data: data, Delay: time.Duration(delayMS) * time.Millisecond}
		if notBefore != 0 {
			m.NotBefore = time.Unix(0, notBefore).In(time.FixedZone("x", 3600))
		}
		if hk != "" {
			m.Headers = map[string][]string{hk: {hv1, hv2}, hk + "2": {hv1}, "-": nil}
		}
		msgs := []Message{m, {Data: []byte(`1`)}}
		ref, err := encodeBody(protocol.PushRequest{Messages: []protocol.PushMessage{pushMessage(msgs[0]), pushMessage(msgs[1])}})
		require.NoError(t, err)
		got := appendPushRequest(nil, msgs, func(h nats.Header) nats.Header { return h })
		requireSameJSON[protocol.PushRequest](t, ref, got, plain(partition, id, hk, hv1, hv2))
	})
}
