package loadtest

import (
	"bytes"
	"encoding/base64"
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
	got, err := comb.DecodePopReply(reply, "q", nil)
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

	empty, err := comb.DecodePopReply([]byte(`{"messages":[]}`), "q", nil)
	require.NoError(t, err)
	require.Empty(t, empty)
	// Fields the loader does not know are skipped, as encoding/json would.
	extra, err := comb.DecodePopReply([]byte(` { "next" : {"a":[1,2]}, "messages" : [ {"partition":"p","offset":1,"data":"x","future":[{}]} ] , "z":null } `), "q", nil)
	require.NoError(t, err)
	require.Equal(t, []byte(`"x"`), extra[0].Data)

	for _, bad := range []string{``, `{`, `{"messages":[{"partition":"p"`, `{"messages":[{"offset":x}]}`, `{"messages":[{"data_b64":"%%"}]}`, `[]`} {
		_, err := comb.DecodePopReply([]byte(bad), "q", nil)
		require.Error(t, err, "%q", bad)
	}
}

func TestRawAckReply(t *testing.T) {
	t.Parallel()
	reply := wire.AckReply([]domain.AckResult{{OK: true}, {OK: false, Error: `lease "l-1" expired`}, {OK: true}})
	got, err := comb.DecodeAckReply(reply)
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
					body := appendPushBody(nil, "p7", payloads, enc, ids, nil)
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
		body := appendPushBody(nil, "p7", payloads, enc, msgIDs{}, nil)
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

// The raw client against protocol's types: what it writes must decode with
// encoding/json into protocol's request types with the values it was
// given, and what it reads from replies json.Marshal makes of protocol's
// reply types must be what encoding/json reads from them. internal/wire's
// tests above hold it against the broker's codec; these hold it against
// the contract, for any names, ids, leases and bytes.

// strictDecode decodes b into v as the broker does: one JSON object, no
// unknown field, nothing after it.
func strictDecode(t *testing.T, b []byte, v any) {
	t.Helper()
	require.True(t, json.Valid(b), "not JSON: %q", b)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), "%q", b)
	require.False(t, dec.More(), "trailing data in %q", b)
}

// viaJSON is s as a JSON reader reads what encoding/json writes of it:
// s itself, but for invalid UTF-8, which becomes U+FFFD.
func viaJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var out string
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// rawRequestCase is one set of values for the raw client's requests.
type rawRequestCase struct {
	partition, group, lease, status string
	offset                          int64
	max, partitions                 int
	waitMS, leaseMS                 int64
	autoAck                         bool
	payload                         []byte
	ids                             msgIDs
	headers                         int // Config.Headers
}

func checkRawRequests(t *testing.T, c rawRequestCase) {
	t.Helper()
	h := header{Run: 1, Seq: 9}
	for _, enc := range []Encoding{EncodingJSON, EncodingBinary} {
		payloads := [][]byte{encodePayload(nil, enc, 64, &h), c.payload}
		if enc == EncodingJSON && !wire.IsJSONData(c.payload) {
			// The raw client sends "data" only for payloads that are JSON
			// (the loader's own are), as its callers promise.
			payloads = payloads[:1]
		}
		body := appendPushBody(nil, c.partition, payloads, enc, c.ids, loadHeaderJSON(c.headers))
		var push protocol.PushRequest
		strictDecode(t, body, &push)
		require.Len(t, push.Messages, len(payloads))
		for i, m := range push.Messages {
			require.Equal(t, viaJSON(t, c.partition), m.Partition, "message %d", i)
			if c.ids.on() {
				require.Equal(t, c.ids.id(i), m.ID)
			} else {
				require.Empty(t, m.ID)
			}
			if c.headers > 0 {
				require.Equal(t, protocol.Headers{loadHeaderName: {loadHeaderValue(c.headers)}}, m.Headers)
				require.Equal(t, string(loadHeaderJSON(c.headers)), string(mustCanonical(t, m.Headers)), "the stored form")
				require.Len(t, loadHeaderJSON(c.headers), c.headers)
			} else {
				require.Nil(t, m.Headers)
			}
			if enc == EncodingJSON {
				require.Nil(t, m.DataB64)
				require.Equal(t, payloads[i], []byte(m.Data), "message %d byte for byte", i)
			} else {
				require.Nil(t, m.Data)
				require.NotNil(t, m.DataB64)
				got, err := base64.StdEncoding.DecodeString(*m.DataB64)
				require.NoError(t, err)
				require.Equal(t, payloads[i], got, "message %d", i)
			}
		}
	}

	o := comb.PopOptions{Group: c.group, Max: c.max, Partitions: c.partitions,
		Wait: time.Duration(c.waitMS) * time.Millisecond, Lease: time.Duration(c.leaseMS) * time.Millisecond, AutoAck: c.autoAck}
	var pop protocol.PopRequest
	strictDecode(t, popRequestBody(o), &pop)
	require.Equal(t, viaJSON(t, c.group), pop.Group)
	require.NotNil(t, pop.Max)
	require.Equal(t, c.max, *pop.Max)
	require.NotNil(t, pop.Partitions)
	require.Equal(t, c.partitions, *pop.Partitions)
	require.Equal(t, o.Wait.Milliseconds(), pop.WaitMS)
	require.Equal(t, o.Lease.Milliseconds(), pop.LeaseMS)
	require.Equal(t, c.autoAck, pop.AutoAck)
	require.Empty(t, pop.Partition)
	require.Empty(t, pop.From)

	acks := []comb.Ack{
		{Partition: c.partition, Offset: c.offset, Lease: c.lease, Status: c.status},
		{Partition: "p0", Offset: 0, Lease: "l-1"},
	}
	var ack protocol.AckRequest
	strictDecode(t, appendAckBody(nil, c.group, acks), &ack)
	require.Equal(t, viaJSON(t, c.group), ack.Group)
	require.Len(t, ack.Acks, len(acks))
	for i, a := range acks {
		got := ack.Acks[i]
		require.Equal(t, viaJSON(t, a.Partition), got.Partition, "ack %d", i)
		require.NotNil(t, got.Offset, "ack %d: the offset is required, 0 included", i)
		require.Equal(t, a.Offset, *got.Offset, "ack %d", i)
		require.Equal(t, viaJSON(t, a.Lease), got.Lease, "ack %d", i)
		require.Equal(t, viaJSON(t, a.Status), got.Status, "ack %d", i)
	}
	// The same acks carried by a pop (-ack-next).
	var carrying protocol.PopRequest
	strictDecode(t, popAckingBody(popRequestBody(o), acks), &carrying)
	require.Equal(t, ack.Acks, carrying.Acks)
	carrying.Acks = nil
	require.Equal(t, pop, carrying)
}

// TestRawRequestsMatchProtocol holds the raw client's request bodies
// against encoding/json and protocol's request types.
func TestRawRequestsMatchProtocol(t *testing.T) {
	t.Parallel()
	ids := msgIDs{set: true, run: 0xfedcba98, producer: 3, partition: 7, first: 1 << 40}
	for _, c := range rawRequestCases() {
		checkRawRequests(t, c)
		c.ids = ids
		checkRawRequests(t, c)
		c.headers = 100
		checkRawRequests(t, c)
	}
}

// mustCanonical is the form the broker stores h in.
func mustCanonical(t *testing.T, h protocol.Headers) []byte {
	t.Helper()
	b, err := wire.CanonicalHeaders(h)
	require.NoError(t, err)
	return b
}

func rawRequestCases() []rawRequestCase {
	return []rawRequestCase{
		{partition: "p7", group: "loadtest", lease: "l-1-6c0e3a52e4bd1d5f", status: protocol.AckCompleted, offset: 17,
			max: protocol.DefaultPopMax, partitions: 1, waitMS: 2000, leaseMS: 30000, autoAck: false, payload: []byte(`{"sku":42}`)},
		{partition: "we\"ird\\ \u2028 név", group: "日本 <&>", lease: "", status: "", offset: 0,
			max: 1, partitions: protocol.MaxPopPartitions, autoAck: true, payload: []byte(`"\u00e9\"\\"`)},
		{partition: "tab\there\nnl\x01\x7f", group: "emoji 👨‍👩‍👧", lease: "l\"", status: protocol.AckDead, offset: -1,
			max: protocol.MaxPopMessages, partitions: 2, waitMS: protocol.MaxWaitMS, leaseMS: protocol.MinLeaseMS, payload: []byte{0xff, 0, '"'}},
		{partition: "nbsp\u00a0zwj\u200d", group: "private \U000f0000 tag \U000e0001", lease: "\u2029", status: "x\\y", offset: 1<<63 - 1,
			max: -3, partitions: 0, payload: []byte(`{"a": [1, {"b":null}], "s":"x,y"}`)},
		{partition: "bad \xff utf8", group: "\xc3", lease: "l", offset: 1, max: 5, partitions: 1, payload: []byte{}},
	}
}

// FuzzRawWireRequests holds the raw client's push, pop and ack bodies
// against encoding/json and protocol's request types for any values.
func FuzzRawWireRequests(f *testing.F) {
	for _, c := range rawRequestCases() {
		f.Add(c.partition, c.group, c.lease, c.status, c.offset, c.max, c.partitions, c.waitMS, c.leaseMS, c.autoAck, c.payload, false, uint64(0))
		f.Add(c.partition, c.group, c.lease, c.status, c.offset, c.max, c.partitions, c.waitMS, c.leaseMS, c.autoAck, c.payload, true, uint64(1<<64-3))
	}
	f.Fuzz(func(t *testing.T, partition, group, lease, status string, offset int64, max, partitions int, waitMS, leaseMS int64, autoAck bool, payload []byte, withIDs bool, first uint64) {
		// Durations the loader can form: at most a few hundred years.
		waitMS %= 1 << 43
		leaseMS %= 1 << 43
		c := rawRequestCase{partition: partition, group: group, lease: lease, status: status, offset: offset,
			max: max, partitions: partitions, waitMS: waitMS, leaseMS: leaseMS, autoAck: autoAck, payload: payload,
			ids: msgIDs{set: withIDs, run: uint32(first >> 32), producer: uint32(first), partition: uint32(offset), first: first}}
		checkRawRequests(t, c)
	})
}

// rawReplyCase is one set of values for the replies the raw client reads.
type rawReplyCase struct {
	partition, id, lease, errText, status string
	offset                                int64
	attempt                               int
	data                                  []byte
	asB64, ok                             bool
}

func checkRawReplies(t *testing.T, c rawReplyCase) {
	t.Helper()
	d := protocol.Delivery{Partition: c.partition, Offset: c.offset, ID: c.id, Lease: c.lease, Attempt: c.attempt,
		CreatedAt: time.Unix(0, c.offset).UTC()}
	if !c.asB64 && json.Valid(c.data) {
		d.Data = json.RawMessage(c.data)
	} else {
		s := base64.StdEncoding.EncodeToString(c.data)
		d.DataB64 = &s
	}
	popReply := protocol.PopReply{Messages: []protocol.Delivery{d, {Partition: "p0", Offset: 1, Attempt: 1, Data: json.RawMessage(`true`)}}}
	b, err := json.Marshal(popReply)
	require.NoError(t, err)
	var std protocol.PopReply
	require.NoError(t, json.Unmarshal(b, &std))
	got, err := comb.DecodePopReply(b, "q", nil)
	require.NoError(t, err, "%s", b)
	require.Len(t, got, len(std.Messages))
	for i, m := range std.Messages {
		want := []byte(m.Data)
		if m.DataB64 != nil {
			want, err = base64.StdEncoding.DecodeString(*m.DataB64)
			require.NoError(t, err)
		}
		require.Equal(t, comb.Delivery{Partition: m.Partition, Offset: m.Offset, ID: m.ID, Lease: m.Lease, Attempt: m.Attempt, Data: want},
			comb.Delivery{Partition: got[i].Partition, Offset: got[i].Offset, ID: got[i].ID, Lease: got[i].Lease, Attempt: got[i].Attempt, Data: got[i].Data},
			"message %d of %s", i, b)
	}

	ackReply := protocol.AckReply{Results: []protocol.AckResult{{OK: c.ok, Error: c.errText}, {OK: true}}}
	b, err = json.Marshal(ackReply)
	require.NoError(t, err)
	var stdAck protocol.AckReply
	require.NoError(t, json.Unmarshal(b, &stdAck))
	acks, err := comb.DecodeAckReply(b)
	require.NoError(t, err, "%s", b)
	require.Len(t, acks, len(stdAck.Results))
	for i, r := range stdAck.Results {
		require.Equal(t, comb.AckResult(r), acks[i], "result %d of %s", i, b)
	}

	pushReply := protocol.PushReply{Results: []protocol.PushResult{
		{Partition: c.partition, Offset: c.offset, Status: c.status},
		{Partition: c.partition + `"status":"x`, Offset: 1, Status: protocol.StatusStored},
	}}
	b, err = json.Marshal(pushReply)
	require.NoError(t, err)
	var stdPush protocol.PushReply
	require.NoError(t, json.Unmarshal(b, &stdPush))
	status := stdPush.Results[0].Status
	for _, withIDs := range []bool{false, true} {
		dups, err := checkPushReply(b, len(stdPush.Results), withIDs)
		switch {
		case status == protocol.StatusStored, status == protocol.StatusSpooled:
			require.NoError(t, err, "%s", b)
			require.Zero(t, dups)
		case status == protocol.StatusDuplicate && withIDs:
			require.NoError(t, err, "%s", b)
			require.Equal(t, 1, dups)
		default:
			require.Error(t, err, "status %q, ids %t: %s", status, withIDs, b)
		}
		_, err = checkPushReply(b, len(stdPush.Results)+1, withIDs)
		require.Error(t, err, "a result too few")
	}
}

func rawReplyCases() []rawReplyCase {
	return []rawReplyCase{
		{partition: "p3", lease: "l-9f2c", status: protocol.StatusStored, offset: 17, attempt: 1, data: []byte(`{"sku":42}`), ok: true},
		{partition: "we\"ird\\ \u2028 név <&>", id: "id-1 日本", lease: "", errText: `lease "l-1" expired`, status: protocol.StatusDuplicate,
			offset: 0, attempt: 2, data: []byte(`{"nested":[1,{"a":"]}"}],"s":"x,y <&> \u00e9 \\u00e9"}`)},
		{partition: "ctl\x01\t\n\x7f", id: "\U000f0000", lease: "l\\\"", errText: "\u2029", status: protocol.StatusSpooled,
			offset: -1, attempt: 1 << 30, data: []byte{0xff, 0, '"', '\\'}},
		{partition: "bad \xff", id: "\xc3", lease: "l", status: "weird", offset: 1<<63 - 1, data: []byte(` 42 `), asB64: false},
		{partition: "", status: `stored","x`, data: []byte{}, asB64: true},
		{partition: "p", status: "", data: []byte(`"\ud83d\ude00 \"quoted\""`), ok: true},
	}
}

// TestRawRepliesMatchProtocol holds the raw client's reply readers against
// encoding/json and protocol's reply types.
func TestRawRepliesMatchProtocol(t *testing.T) {
	t.Parallel()
	for _, c := range rawReplyCases() {
		checkRawReplies(t, c)
	}
}

// FuzzRawWireReplies holds the raw client's reply readers against
// encoding/json for any replies json.Marshal makes of protocol's pop, ack
// and push replies.
func FuzzRawWireReplies(f *testing.F) {
	for _, c := range rawReplyCases() {
		f.Add(c.partition, c.id, c.lease, c.errText, c.status, c.offset, c.attempt, c.data, c.asB64, c.ok)
	}
	f.Fuzz(func(t *testing.T, partition, id, lease, errText, status string, offset int64, attempt int, data []byte, asB64, ok bool) {
		checkRawReplies(t, rawReplyCase{partition: partition, id: id, lease: lease, errText: errText, status: status,
			offset: offset, attempt: attempt, data: data, asB64: asB64, ok: ok})
	})
}
