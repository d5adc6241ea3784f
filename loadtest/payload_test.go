package loadtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

func TestPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	h := header{Index: 7, Run: 0xdeadbeef, Producer: 3, Partition: 199, Seq: 1 << 40, Sched: time.Now().UnixNano(), Floor: 12}
	for _, enc := range []Encoding{EncodingJSON, EncodingBinary} {
		for _, size := range []int{minPayload(enc), 256, 1000} {
			b := encodePayload(nil, enc, size, &h)
			require.Len(t, b, size)
			require.Equal(t, enc == EncodingJSON, wire.IsJSONData(b), "%s payload travels as data only when JSON", enc)
			var got header
			require.NoError(t, decodePayload(b, &got))
			require.Equal(t, h, got)
		}
	}
	var got header
	require.ErrorIs(t, decodePayload([]byte(`{"sku":42}`), &got), errNotOurs)
	require.ErrorIs(t, decodePayload([]byte(`"short"`), &got), errNotOurs)
	require.ErrorIs(t, decodePayload(nil, &got), errNotOurs)
}

// The benchmarks below measure what each payload encoding costs a message
// on its way through Comb, per 100-message push and pop: the loader's side
// (encode the push as the Go client does, decode the pop reply as it does)
// and the broker's side (internal/wire's push decoder and pop encoder).

// clientEncodeData mirrors clients/go's unexported encodeData: data when
// compact valid JSON, else base64.
func clientEncodeData(b []byte) (json.RawMessage, *string) {
	if len(b) > 0 && utf8.Valid(b) && json.Valid(b) {
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil && bytes.Equal(buf.Bytes(), b) {
			return b, nil
		}
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

func benchPayloads(enc Encoding) [][]byte {
	out := make([][]byte, 100)
	for i := range out {
		h := header{Index: uint16(i), Run: 1, Producer: 2, Partition: 3, Seq: uint64(i + 1), Sched: time.Now().UnixNano()}
		out[i] = encodePayload(nil, enc, 256, &h)
	}
	return out
}

func benchLoaderSide(b *testing.B, enc Encoding) {
	payloads := benchPayloads(enc)
	msgs := make([]domain.Message, len(payloads))
	// The messages of one push transaction share its now() as their
	// creation time, and a pop returns a partition's messages in runs
	// of such.
	at := time.Now()
	for i, p := range payloads {
		msgs[i] = domain.Message{Partition: "p3", Offset: int64(i), Lease: "l-0123456789", Attempt: 1, CreatedAt: at, Data: p, Encoding: wire.EncodingOf(p)}
	}
	reply, _ := wire.PopReply(msgs, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(payloads) * 256))
	for b.Loop() {
		req := protocol.PushRequest{Messages: make([]protocol.PushMessage, len(payloads))}
		for i, p := range payloads {
			req.Messages[i].Partition = "p3"
			req.Messages[i].Data, req.Messages[i].DataB64 = clientEncodeData(p)
		}
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		if err := e.Encode(req); err != nil {
			b.Fatal(err)
		}
		var rep protocol.PopReply
		if err := json.Unmarshal(reply, &rep); err != nil {
			b.Fatal(err)
		}
		var h header
		for _, m := range rep.Messages {
			data := []byte(m.Data)
			if m.DataB64 != nil {
				var err error
				if data, err = base64.StdEncoding.DecodeString(*m.DataB64); err != nil {
					b.Fatal(err)
				}
			}
			if err := decodePayload(data, &h); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func benchBrokerSide(b *testing.B, enc Encoding) {
	payloads := benchPayloads(enc)
	var body []byte
	{
		req := protocol.PushRequest{Messages: make([]protocol.PushMessage, len(payloads))}
		for i, p := range payloads {
			req.Messages[i].Partition = "p3"
			req.Messages[i].Data, req.Messages[i].DataB64 = clientEncodeData(p)
		}
		body, _ = json.Marshal(req)
	}
	msgs := make([]domain.Message, len(payloads))
	b.ReportAllocs()
	b.SetBytes(int64(len(payloads) * 256))
	for b.Loop() {
		pm, err := wire.DecodePush(body, wire.DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		for i := range pm {
			msgs[i] = domain.Message{Partition: pm[i].Partition, Offset: int64(i), Lease: "l-0123456789", Attempt: 1, CreatedAt: time.Now(), Data: pm[i].Data, Encoding: pm[i].Encoding}
		}
		wire.PopReply(msgs, 0)
	}
}

func BenchmarkPayloadLoaderJSON(b *testing.B)   { benchLoaderSide(b, EncodingJSON) }
func BenchmarkPayloadLoaderBinary(b *testing.B) { benchLoaderSide(b, EncodingBinary) }
func BenchmarkPayloadBrokerJSON(b *testing.B)   { benchBrokerSide(b, EncodingJSON) }
func BenchmarkPayloadBrokerBinary(b *testing.B) { benchBrokerSide(b, EncodingBinary) }

// benchRawLoaderSide is benchLoaderSide with the loader's raw client.
func benchRawLoaderSide(b *testing.B, enc Encoding) {
	payloads := benchPayloads(enc)
	msgs := make([]domain.Message, len(payloads))
	// The messages of one push transaction share its now() as their
	// creation time, and a pop returns a partition's messages in runs
	// of such.
	at := time.Now()
	for i, p := range payloads {
		msgs[i] = domain.Message{Partition: "p3", Offset: int64(i), Lease: "l-0123456789", Attempt: 1, CreatedAt: at, Data: p, Encoding: wire.EncodingOf(p)}
	}
	reply, _ := wire.PopReply(msgs, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(payloads) * 256))
	var body []byte
	for b.Loop() {
		body = appendPushBody(body[:0], "p3", payloads, enc, msgIDs{}, nil)
		got, err := comb.DecodePopReply(reply, "q", nil)
		if err != nil {
			b.Fatal(err)
		}
		var h header
		for _, d := range got {
			if err := decodePayload(d.Data, &h); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkPayloadRawLoaderJSON(b *testing.B)   { benchRawLoaderSide(b, EncodingJSON) }
func BenchmarkPayloadRawLoaderBinary(b *testing.B) { benchRawLoaderSide(b, EncodingBinary) }
