package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// The raw client must read exactly what the bridge writes: its replies come
// from internal/wire's encoders here, and its requests go through
// internal/wire's decoders.

func TestRawPopReplyRoundTrip(t *testing.T) {
	t.Parallel()
	h := header{Run: 1, Producer: 2, Partition: 3, Seq: 4, Sched: 5}
	msgs := []domain.Message{
		{Partition: "p3", Offset: 17, Lease: "l-9f2c", Attempt: 1, CreatedAt: time.Now(), Data: encodePayload(nil, EncodingJSON, 256, &h)},
		{Partition: "p3", Offset: 18, Lease: "l-9f2c", Attempt: 2, CreatedAt: time.Now(), Data: encodePayload(nil, EncodingBinary, 100, &h)},
		{Partition: "we\"ird\\ \u2028 név", Offset: 1, ID: "id-1", Attempt: 1, CreatedAt: time.Now(), Data: []byte(`{"nested":[1,{"a":"]}"}],"s":"x,y"}`)},
		{Partition: "p0", Offset: 0, Attempt: 1, CreatedAt: time.Now(), Data: []byte{}},
		{Partition: "p0", Offset: 2, Attempt: 1, CreatedAt: time.Now(), Data: []byte(`true`)},
		{Partition: "p0", Offset: 3, Attempt: 1, CreatedAt: time.Now(), Data: []byte(`-12.5e3`)},
	}
	reply, n := wire.PopReply(msgs, 0)
	require.Equal(t, len(msgs), n)
	got, err := parsePopReply(reply, nil)
	require.NoError(t, err)
	require.Len(t, got, len(msgs))
	for i, m := range msgs {
		require.Equal(t, m.Partition, got[i].Partition, i)
		require.Equal(t, m.Offset, got[i].Offset, i)
		require.Equal(t, m.Lease, got[i].Lease, i)
		require.Equal(t, m.ID, got[i].ID, i)
		require.Equal(t, m.Attempt, got[i].Attempt, i)
		require.Equal(t, m.Data, got[i].Data, "message %d byte for byte", i)
	}

	empty, err := parsePopReply([]byte(`{"messages":[]}`), nil)
	require.NoError(t, err)
	require.Empty(t, empty)
	// Fields the loader does not know are skipped, as encoding/json would.
	extra, err := parsePopReply([]byte(` { "next" : {"a":[1,2]}, "messages" : [ {"partition":"p","offset":1,"data":"x","future":[{}]} ] , "z":null } `), nil)
	require.NoError(t, err)
	require.Equal(t, []byte(`"x"`), extra[0].Data)

	for _, bad := range []string{``, `{`, `{"messages":[{"partition":"p"`, `{"messages":[{"offset":x}]}`, `{"messages":[{"data_b64":"%%"}]}`, `[]`} {
		_, err := parsePopReply([]byte(bad), nil)
		require.Error(t, err, "%q", bad)
	}
}

func TestRawAckReply(t *testing.T) {
	t.Parallel()
	reply := wire.AckReply([]domain.AckResult{{OK: true}, {OK: false, Error: `lease "l-1" expired`}, {OK: true}})
	got, err := parseAckReply(reply)
	require.NoError(t, err)
	require.Equal(t, []comb.AckResult{{OK: true}, {OK: false, Error: `lease "l-1" expired`}, {OK: true}}, got)
}

func TestRawPushReply(t *testing.T) {
	t.Parallel()
	pushReply := func(rs ...protocol.PushResult) []byte {
		b, err := json.Marshal(protocol.PushReply{Results: rs})
		require.NoError(t, err)
		return b
	}
	ok := pushReply(protocol.PushResult{Partition: "p1", Offset: 1, Status: protocol.StatusStored}, protocol.PushResult{Partition: "p1", Status: protocol.StatusSpooled})
	for _, withIDs := range []bool{false, true} {
		dups, err := checkPushReply(ok, 2, withIDs)
		require.NoError(t, err)
		require.Zero(t, dups)
		_, err = checkPushReply(ok, 3, withIDs)
		require.Error(t, err)
	}
	dup := wire.PushReply([]domain.PushResult{{Partition: "p1", Offset: 1, Status: domain.Duplicate}, {Partition: "p1", Offset: 2, Status: domain.Stored}})
	_, err := checkPushReply(dup, 2, false)
	require.Error(t, err, "a message without an id cannot be a duplicate")
	// With ids a duplicate is an answer, counted, not a failure.
	dups, err := checkPushReply(dup, 2, true)
	require.NoError(t, err)
	require.Equal(t, 1, dups)
	odd := pushReply(protocol.PushResult{Partition: "p1", Status: "weird"})
	_, err = checkPushReply(odd, 1, true)
	require.Error(t, err)
}

// TestRawPushIDsDecode checks producer ids through the broker's own
// decoder: every message gets its id, unique in the run across producers
// and partitions (JetStream looks duplicates up per stream), short, and
// the data is untouched.
func TestRawPushIDsDecode(t *testing.T) {
	t.Parallel()
	const run = 0xfedcba98 // "1ypqx08" in base 36
	h := header{Run: run, Producer: 7, Seq: 1 << 40}
	seen := map[string]bool{}
	for _, enc := range []Encoding{EncodingJSON, EncodingBinary} {
		for producer := range uint32(2) {
			for partition := range uint32(2) {
				for _, first := range []uint64{1, 1 << 40, 1<<64 - 3} {
					ids := msgIDs{set: true, run: run, producer: producer, partition: partition, first: first}
					payloads := [][]byte{encodePayload(nil, enc, 256, &h), encodePayload(nil, enc, 64, &h), encodePayload(nil, enc, 64, &h)}
					body := appendPushBody(nil, "p7", payloads, enc, ids)
					require.True(t, json.Valid(body))
					got, err := wire.DecodePush(body, wire.DefaultLimits())
					require.NoError(t, err)
					require.Len(t, got, len(payloads))
					for i := range payloads {
						require.Equal(t, "p7", got[i].Partition)
						require.Equal(t, payloads[i], got[i].Data)
						require.Equal(t, ids.id(i), got[i].ID)
						want := fmt.Sprintf("1ypqx08-%d-%d-%s", producer, partition, strconv.FormatUint(first+uint64(i), 36))
						require.Equal(t, want, got[i].ID)
						if enc == EncodingJSON {
							require.False(t, seen[got[i].ID], "id %s given twice", got[i].ID)
							seen[got[i].ID] = true
						}
					}
				}
			}
		}
	}
	require.Len(t, seen, 2*2*3*3)
	longest := msgIDs{set: true, run: 1<<32 - 1, producer: 1<<32 - 1, partition: 1<<32 - 1, first: 1<<64 - 1}
	require.Len(t, longest.id(0), 37)
	require.LessOrEqual(t, len(longest.id(0)), protocol.MaxIDBytes)
}

func TestRawRequestsDecode(t *testing.T) {
	t.Parallel()
	h := header{Run: 1, Seq: 9}
	for _, enc := range []Encoding{EncodingJSON, EncodingBinary} {
		payloads := [][]byte{encodePayload(nil, enc, 256, &h), encodePayload(nil, enc, 64, &h)}
		body := appendPushBody(nil, "p7", payloads, enc, msgIDs{})
		got, err := wire.DecodePush(body, wire.DefaultLimits())
		require.NoError(t, err)
		for i := range payloads {
			require.Equal(t, "p7", got[i].Partition)
			require.Equal(t, payloads[i], got[i].Data)
			require.Empty(t, got[i].ID, "no ids when deduplication is off")
		}
	}
	pop := popRequestBody(comb.PopOptions{Group: "g", Max: 100, Partitions: 2, Wait: 2 * time.Second, Lease: 30 * time.Second, AutoAck: true})
	require.True(t, json.Valid(pop))
	p, err := wire.DecodePop(pop)
	require.NoError(t, err)
	require.Equal(t, "g", p.Params.Group)
	require.EqualValues(t, 100, p.Params.Max)
	require.EqualValues(t, 2, p.Params.Partitions)
	require.True(t, p.Params.AutoAck)
	require.Equal(t, 2*time.Second, p.Wait)
}

// FuzzParsePopReply checks that the scanner never panics or loops, and
// that what it accepts from a reply encoding/json also reads agrees on
// the messages' positions.
func FuzzParsePopReply(f *testing.F) {
	h := header{Run: 1}
	reply, _ := wire.PopReply([]domain.Message{
		{Partition: "p1", Offset: 1, Lease: "l", Attempt: 1, Data: encodePayload(nil, EncodingJSON, 64, &h)},
		{Partition: "p\"2", Offset: 2, Attempt: 1, Data: []byte{0xff, 0}},
	}, 0)
	f.Add(reply)
	f.Add([]byte(`{"messages":[]}`))
	f.Add([]byte(`{"messages":[{"data":{"a":["]",{}]}}]}`))
	f.Add([]byte(`{"messages":[{"partition":"\u00e9\"","offset":-1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parsePopReply(b, nil)
		if err != nil {
			return
		}
		var std struct {
			Messages []struct {
				Partition string `json:"partition"`
				Offset    int64  `json:"offset"`
			} `json:"messages"`
		}
		if json.Unmarshal(b, &std) != nil {
			return // the scanner is lenient where it skips; fine
		}
		for _, k := range []string{`"messages"`, `"partition"`, `"offset"`} {
			if bytes.Count(bytes.ToLower(b), []byte(k)) != bytes.Count(b, []byte(k)) {
				return // encoding/json matches keys in any case; the bridge writes them in one
			}
		}
		if len(std.Messages) != len(got) {
			t.Fatalf("%d messages, encoding/json reads %d", len(got), len(std.Messages))
		}
		for i := range got {
			if got[i].Partition != std.Messages[i].Partition || got[i].Offset != std.Messages[i].Offset {
				t.Fatalf("message %d: %q/%d, encoding/json reads %q/%d", i, got[i].Partition, got[i].Offset, std.Messages[i].Partition, std.Messages[i].Offset)
			}
		}
	})
}
