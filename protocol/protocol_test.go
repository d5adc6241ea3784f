package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/protocol"
)

func TestSubject(t *testing.T) {
	t.Parallel()
	require.Equal(t, "comb.push.orders", protocol.Subject(protocol.DefaultPrefix, protocol.VerbPush, "orders"))
	require.Equal(t, "comb.pop.billing.invoices", protocol.Subject("comb", protocol.VerbPop, "billing.invoices"))
	require.Equal(t, "my.comb.ack.q", protocol.Subject("my.comb", protocol.VerbAck, "q"))
	require.Equal(t, "comb.list", protocol.Subject("comb", protocol.VerbList, ""))
	require.Equal(t, "comb.list", protocol.Subject("comb", protocol.VerbList, "ignored"), "list takes no queue")

	// Every verb, once, and each one a subject ParseSubject reads back.
	require.Len(t, protocol.Verbs, 15)
	seen := map[string]bool{}
	for _, v := range protocol.Verbs {
		require.False(t, seen[v], "verb %s twice", v)
		seen[v] = true
		verb, queue, err := protocol.ParseSubject("comb", protocol.Subject("comb", v, "a.b"))
		require.NoError(t, err, v)
		require.Equal(t, v, verb)
		if !protocol.TakesQueue(v) {
			require.Empty(t, queue)
		} else {
			require.Equal(t, "a.b", queue)
		}
	}
}

func TestParseSubject(t *testing.T) {
	t.Parallel()
	ok := []struct{ subject, verb, queue string }{
		{"comb.push.orders", protocol.VerbPush, "orders"},
		{"comb.put.billing.invoices", protocol.VerbPut, "billing.invoices"},
		{"comb.pop.a-b_c.D9", protocol.VerbPop, "a-b_c.D9"},
		{"comb.list", protocol.VerbList, ""},
		{"comb.txn", protocol.VerbTxn, ""},
		{"comb.dlq.x", protocol.VerbDLQ, "x"},
		{"comb.seek.a.b", protocol.VerbSeek, "a.b"},
		{"comb.groups.a", protocol.VerbGroups, "a"},
		{"comb.renew.q", protocol.VerbRenew, "q"},
		{"comb.configure.q", protocol.VerbConfigure, "q"},
		{"comb.info.q", protocol.VerbInfo, "q"},
		{"comb.delete.q", protocol.VerbDelete, "q"},
		{"comb.ack.q", protocol.VerbAck, "q"},
	}
	for _, c := range ok {
		verb, queue, err := protocol.ParseSubject("comb", c.subject)
		require.NoError(t, err, c.subject)
		require.Equal(t, c.verb, verb, c.subject)
		require.Equal(t, c.queue, queue, c.subject)
	}
	verb, queue, err := protocol.ParseSubject("my.comb", "my.comb.ack.q")
	require.NoError(t, err)
	require.Equal(t, protocol.VerbAck, verb)
	require.Equal(t, "q", queue)

	bad := map[string]string{
		"comb":                "does not start with",
		"comb.push":           "queue name missing",
		"comb.push.":          "queue name missing",
		"comb.list.x":         "list takes no queue",
		"comb.txn.orders":     "txn takes no queue",
		"comb.frob.x":         `unknown verb "frob"`,
		"comb..x":             `unknown verb ""`,
		"combx.push.x":        "does not start with",
		"other.push.x":        "does not start with",
		"comb.push.a..b":      "empty token",
		"comb.push.a b":       "character ' '",
		"comb.push.a.":        "empty token",
		"comb.push.a.*":       "character '*'",
		"comb.push.a.>":       "character '>'",
		"comb.push.caf\u00e9": "character",
	}
	for subject, want := range bad {
		_, _, err := protocol.ParseSubject("comb", subject)
		require.Error(t, err, subject)
		pe, ok := protocol.AsError(err)
		require.True(t, ok, subject)
		require.Equal(t, protocol.CodeBadRequest, pe.Code, subject)
		require.Contains(t, pe.Message, want, subject)
		require.ErrorIs(t, err, protocol.ErrBadRequest, subject)
	}
}

// FuzzParseSubject checks ParseSubject's contract: what it accepts is
// exactly a subject Subject makes of the verb and queue it returns, with a
// known verb and a valid queue; what it refuses is a 400; and it reads back
// every subject Subject makes of a verb and a valid queue.
func FuzzParseSubject(f *testing.F) {
	f.Add("comb", "comb.push.orders", uint8(0), "orders")
	f.Add("comb", "comb.list", uint8(7), "")
	f.Add("my.comb", "my.comb.seek.a.b", uint8(10), "a.b")
	f.Add("comb", "comb.push.a..b", uint8(2), "a..b")
	f.Add("", ".pop.x", uint8(2), "x")
	f.Add("comb", "comb.list.x", uint8(7), "x")
	f.Add("comb", "comb.txn", uint8(13), "")
	f.Add("comb.", "comb..push.q", uint8(1), "caf\u00e9")
	f.Fuzz(func(t *testing.T, prefix, subject string, verbIndex uint8, queue string) {
		verb, q, err := protocol.ParseSubject(prefix, subject)
		if err != nil {
			pe, ok := protocol.AsError(err)
			require.True(t, ok, "%T %v", err, err)
			require.Equal(t, protocol.CodeBadRequest, pe.Code)
			require.ErrorIs(t, err, protocol.ErrBadRequest)
		} else {
			require.Equal(t, subject, protocol.Subject(prefix, verb, q))
			require.Contains(t, protocol.Verbs, verb)
			if !protocol.TakesQueue(verb) {
				require.Empty(t, q)
			} else {
				require.NoError(t, protocol.ValidateQueue(q))
			}
		}

		v := protocol.Verbs[int(verbIndex)%len(protocol.Verbs)]
		if protocol.TakesQueue(v) && protocol.ValidateQueue(queue) != nil {
			return
		}
		gotVerb, gotQueue, err := protocol.ParseSubject(prefix, protocol.Subject(prefix, v, queue))
		require.NoError(t, err)
		require.Equal(t, v, gotVerb)
		if !protocol.TakesQueue(v) {
			require.Empty(t, gotQueue)
		} else {
			require.Equal(t, queue, gotQueue)
		}
	})
}

func TestErrorSentinels(t *testing.T) {
	t.Parallel()
	sentinels := map[int]error{
		protocol.CodeBadRequest:  protocol.ErrBadRequest,
		protocol.CodeNotFound:    protocol.ErrNotFound,
		protocol.CodeConflict:    protocol.ErrConflict,
		protocol.CodeTooLarge:    protocol.ErrTooLarge,
		protocol.CodeTooMany:     protocol.ErrLimit,
		protocol.CodeInternal:    protocol.ErrInternal,
		protocol.CodeUnavailable: protocol.ErrUnavailable,
	}
	// Codes follow HTTP's meanings.
	require.Equal(t, []int{400, 404, 409, 413, 429, 500, 503}, []int{protocol.CodeBadRequest, protocol.CodeNotFound,
		protocol.CodeConflict, protocol.CodeTooLarge, protocol.CodeTooMany, protocol.CodeInternal, protocol.CodeUnavailable})
	for code, want := range sentinels {
		require.Same(t, want, protocol.Sentinel(code))
		e := protocol.Errorf(code, "queue %q: %s", "q", "why")
		require.Equal(t, code, e.Code)
		require.Equal(t, `queue "q": why`, e.Message)
		require.Equal(t, fmt.Sprintf(`queue "q": why (%d)`, code), e.Error())
		wrapped := fmt.Errorf("comb: pop q: %w", e)
		require.ErrorIs(t, wrapped, want)
		for other, s := range sentinels {
			if other != code {
				require.NotErrorIs(t, wrapped, s, "%d is not %d", code, other)
			}
		}
		pe, ok := protocol.AsError(wrapped)
		require.True(t, ok)
		require.Same(t, e, pe)
		require.Equal(t, code == 429 || code == 503, e.Temporary(), "%d", code)
	}
	for _, code := range []int{0, 200, 401, 418, 502} {
		require.Nil(t, protocol.Sentinel(code), code)
		e := &protocol.Error{Code: code, Message: "m"}
		for _, s := range sentinels {
			require.NotErrorIs(t, e, s)
		}
		require.False(t, e.Temporary())
	}
	require.Equal(t, "queue q not found (404)", (&protocol.Error{Code: 404, Message: "queue q not found"}).Error())

	bad := protocol.BadRequest("max %d is out of range", 0)
	require.Equal(t, protocol.CodeBadRequest, bad.Code)
	require.Equal(t, "max 0 is out of range", bad.Message)
	_, ok := protocol.AsError(errors.New("plain"))
	require.False(t, ok)
	_, ok = protocol.AsError(nil)
	require.False(t, ok)
}

func TestValidateQueue(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"a", "orders", "billing.invoices", "A-Z_a-z.0-9", strings.Repeat("a", 255),
		strings.TrimSuffix(strings.Repeat("a.", 16), ".")} {
		require.NoError(t, protocol.ValidateQueue(s), s)
	}
	bad := map[string]string{
		"":                       "empty",
		strings.Repeat("a", 256): "256 bytes",
		strings.TrimSuffix(strings.Repeat("a.", 17), "."): "17 tokens",
		".a":        "empty token",
		"a.":        "empty token",
		"a..b":      "empty token",
		"bad$name":  `queue name "bad$name" has character '$' at byte 3; tokens allow only A-Z a-z 0-9 _ -`,
		"a b":       "character ' '",
		"a*":        "character '*'",
		"a.>":       "character '>'",
		"caf\u00e9": "character",
		"a\x00":     "character",
	}
	for s, want := range bad {
		err := protocol.ValidateQueue(s)
		require.ErrorContains(t, err, want, "%q", s)
		require.ErrorIs(t, err, protocol.ErrBadRequest, "%q", s)
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"eu", "with space", "caf\u00e9", "日本", "emoji 👨‍👩‍👧", strings.Repeat("x", 255), "a.b*>", "\U000f0000"} {
		require.NoError(t, protocol.ValidateName("partition", s), s)
	}
	bad := map[string]string{
		"":                       "empty",
		strings.Repeat("x", 256): "256 bytes",
		"a\nb":                   "control character",
		"a\x00":                  "control character",
		"a\x7f":                  "control character",
		"a\u0085":                "control character",
		"a\u2028":                "control character",
		"a\u2029":                "control character",
		"a\xffb":                 "invalid UTF-8",
	}
	for s, want := range bad {
		err := protocol.ValidateName("group", s)
		require.ErrorContains(t, err, want, "%q", s)
		require.ErrorContains(t, err, "group")
		require.ErrorIs(t, err, protocol.ErrBadRequest)
	}
}

func TestValidateText(t *testing.T) {
	t.Parallel()
	// Unlike ValidateName, an empty text is fine: an absent producer id.
	require.NoError(t, protocol.ValidateText("id", "", protocol.MaxIDBytes))
	require.NoError(t, protocol.ValidateText("id", "order-7", protocol.MaxIDBytes))
	require.NoError(t, protocol.ValidateText("id", "abcd", 4))
	require.ErrorContains(t, protocol.ValidateText("id", "abcde", 4), "id: 5 bytes, at most 4 allowed")
	require.ErrorContains(t, protocol.ValidateText("id", "é", 1), "2 bytes")
	require.ErrorContains(t, protocol.ValidateText("id", "ok\x1f", 10), `id: control character '\x1f' at byte 2`)
	require.ErrorContains(t, protocol.ValidateText("id", "ok\u009f", 10), "id: control character U+009F at byte 2")
	require.ErrorContains(t, protocol.ValidateText("id", "é\xc3", 10), "id: invalid UTF-8 at byte 2")
	require.ErrorIs(t, protocol.ValidateText("id", "\t", 10), protocol.ErrBadRequest)
}

// TestJSONShapes decodes the JSON of docs/protocol.md's examples into
// protocol's types, strictly, and encodes them again: the same bytes come
// back, so field names, their order and what is left out when empty are
// as the page shows them.
func TestJSONShapes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    any    // a pointer to a zero value of the type
		in   string // JSON from the page
		want string // its encoding again, if not in
	}{
		{v: new(protocol.PushRequest), in: `{"messages":[{"partition":"eu","id":"order-9","data":{"sku":44}},{"data_b64":"AAEC"}]}`},
		{v: new(protocol.PushRequest), in: `{"messages":[{"data_b64":""}]}`},
		{v: new(protocol.PushReply), in: `{"results":[{"partition":"eu","offset":2,"status":"stored"},{"partition":"default","offset":0,"status":"stored"}]}`},
		{v: new(protocol.PushReply), in: `{"results":[{"partition":"eu","offset":1,"status":"duplicate"}]}`},
		{v: new(protocol.PopRequest), in: `{"group":"billing","partition":"eu","max":100,"partitions":1,"wait_ms":5000,"lease_ms":30000,"auto_ack":false,"from":"all"}`,
			want: `{"group":"billing","partition":"eu","max":100,"partitions":1,"wait_ms":5000,"lease_ms":30000,"from":"all"}`},
		{v: new(protocol.PopRequest), in: `{"group":"billing","partition":"default","auto_ack":true}`},
		{v: new(protocol.PopRequest), in: `{}`},
		{v: new(protocol.PopRequest), in: `{"max":0}`}, // sent, and refused: a pointer tells it from absent
		{v: new(protocol.PopReply), in: `{"messages":[{"partition":"eu","offset":1,"id":"order-8","lease":"l-1-6c0e3a52e4bd1d5f","attempt":1,"created_at":"2026-11-30T16:51:37.98668Z","data":{"sku":43}}]}`},
		{v: new(protocol.PopReply), in: `{"messages":[{"partition":"default","offset":1,"attempt":1,"created_at":"2026-11-30T16:51:46.925243Z","data_b64":"AAEC"}]}`},
		{v: new(protocol.PopReply), in: `{"messages":[]}`},
		{v: new(protocol.PopReply), in: `{"messages":[{"queue":"billing.invoices","partition":"default","offset":0,"lease":"l-4-1f3a9c2e7b6d5a40","attempt":1,"created_at":"2026-12-01T21:40:12.31857Z","data":{"amount":120}}]}`},
		{v: new(protocol.PopRequest), in: `{"group":"ledger","max":1}`},
		{v: new(protocol.AckRequest), in: `{"group":"billing","acks":[{"partition":"eu","offset":2,"lease":"l-1-6c0e3a52e4bd1d5f","status":"completed"}]}`},
		{v: new(protocol.AckRequest), in: `{"acks":[{"offset":0,"lease":"l-1"}]}`},
		{v: new(protocol.AckRequest), in: `{"group":"billing","acks":[{"partition":"eu","offset":2,"lease":"l-1-6c0e3a52e4bd1d5f","status":"failed","delay_ms":500,"error":"payment service timed out"}]}`},
		{v: new(protocol.AckRequest), in: `{"acks":[{"offset":0,"lease":"l-1","status":"retry","delay_ms":0}]}`}, // 0 is sent: a pointer tells it from absent
		{v: new(protocol.AckReply), in: `{"results":[{"ok":true},{"ok":false,"error":"lease expired or not held by this group"}]}`},
		{v: new(protocol.RenewRequest), in: `{"leases":["l-3-e8ebeb415a796209"],"lease_ms":60000}`},
		{v: new(protocol.RenewReply), in: `{"results":[{"lease":"l-3-e8ebeb415a796209","ok":true,"expires_at":"2026-11-30T16:52:44.42747Z"},{"lease":"l-9-00","ok":false,"error":"lease expired or not held by this group"}]}`},
		{v: new(protocol.ConfigPatch), in: `{"max_attempts":2,"dedup_window_s":3600}`},
		{v: new(protocol.ConfigPatch), in: `{"retry_delay_ms":1000,"retry_backoff_pct":200,"retry_delay_max_ms":60000}`},
		{v: new(protocol.ConfigPatch), in: `{"lease_ms":100,"max_attempts":1,"dead_letter":false,"dedup_window_s":0,"completed_retention_s":0,"max_age_s":0,"delay_ms":0,"max_messages":0,"max_bytes":0,"max_message_bytes":1}`},
		{v: new(protocol.QueueConfig), in: `{"lease_ms":30000,"max_attempts":2,"dead_letter":true,"retry_delay_ms":0,"retry_backoff_pct":100,"retry_delay_max_ms":0,"dedup_window_s":3600,"completed_retention_s":0,"max_age_s":0,"delay_ms":0,"max_messages":0,"max_bytes":0,"max_message_bytes":1048576}`},
		{v: new(protocol.Info), in: `{"name":"orders","config":{"lease_ms":30000,"max_attempts":2,"dead_letter":true,"retry_delay_ms":0,"retry_backoff_pct":100,"retry_delay_max_ms":0,"dedup_window_s":3600,"completed_retention_s":0,"max_age_s":0,"delay_ms":0,"max_messages":0,"max_bytes":0,"max_message_bytes":1048576},"created_at":"2026-11-30T16:51:37.943951Z","messages":5,"bytes":36,"dead_letters":0,"partition_count":2,"group_count":1,"partitions":[{"name":"default","next_offset":2,"low_offset":0},{"name":"eu","next_offset":3,"low_offset":0}],"groups":[{"name":"billing","pending":3,"leased":0}],"next":""}`},
		{v: new(protocol.InfoRequest), in: `{}`},
		{v: new(protocol.InfoRequest), in: `{"limit":1,"after":"AgdkZWZhdWx0"}`},
		{v: new(protocol.ListReply), in: `{"queues":[{"name":"orders","partitions":2,"messages":5,"bytes":36,"groups":1,"pending":3}],"next":"orders"}`},
		{v: new(protocol.ListRequest), in: `{"limit":1,"after":"orders"}`},
		{v: new(protocol.DLQRequest), in: `{"group":"billing"}`},
		{v: new(protocol.DLQRequest), in: `{"group":"billing","limit":10,"after":"d-3"}`},
		{v: new(protocol.DLQRequest), in: `{"replay":["d-1"]}`},
		{v: new(protocol.DLQRequest), in: `{"purge":["d-1"]}`},
		{v: new(protocol.DLQReply), in: `{"dead_letters":[{"dlq_id":"d-1","group":"billing","partition":"default","offset":0,"attempts":2,"reason":"failed","dead_at":"2026-11-30T16:51:44.447322Z","data_b64":"AAEC"}],"next":""}`},
		{v: new(protocol.DLQReply), in: `{"dead_letters":[{"dlq_id":"d-2","group":"g","partition":"eu","offset":7,"id":"order-9","attempts":1,"reason":"dead","dead_at":"2026-11-30T16:51:44Z","data":{"sku":44}}],"next":"d-2"}`},
		{v: new(protocol.DLQReply), in: `{"dead_letters":[{"dlq_id":"d-2","group":"billing","partition":"eu","offset":3,"attempts":2,"reason":"failed","error":"payment service timed out","dead_at":"2026-11-30T16:51:44Z","data":{"sku":45}}],"next":""}`},
		{v: new(protocol.DoneReply), in: `{"done":1}`},
		{v: new(protocol.SeekRequest), in: `{"group":"billing","partition":"eu","to":"start"}`},
		{v: new(protocol.SeekRequest), in: `{"to":"2026-11-30T16:51:44Z"}`},
		{v: new(protocol.SeekReply), in: `{"moved":1}`},
		{v: new(protocol.OKReply), in: `{"ok":true}`},
		{v: new(protocol.ErrorReply), in: `{"error":{"code":400,"message":"acks[0].status: unknown status \"done\"; want completed, retry, failed or dead"}}`},
		{v: new(protocol.ErrorReply), in: `{"error":{"code":404,"message":"queue \"orders\": not found"}}`},
	} {
		name := fmt.Sprintf("%T %s", c.v, c.in)
		dec := json.NewDecoder(strings.NewReader(c.in))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(c.v), name)
		out, err := json.Marshal(c.v)
		require.NoError(t, err, name)
		want := c.want
		if want == "" {
			want = c.in
		}
		require.Equal(t, want, string(out), name)
	}
}

// TestJSONValues checks what the shapes decode to where the pointer or the
// zero value carries meaning.
func TestJSONValues(t *testing.T) {
	t.Parallel()
	var pop protocol.PopRequest
	require.NoError(t, json.Unmarshal([]byte(`{}`), &pop))
	require.Nil(t, pop.Max, "absent: the default")
	require.Nil(t, pop.Partitions)
	require.NoError(t, json.Unmarshal([]byte(`{"max":0,"partitions":3}`), &pop))
	require.NotNil(t, pop.Max, "0 is sent, and out of range")
	require.Equal(t, 0, *pop.Max)
	require.Equal(t, 3, *pop.Partitions)

	var ack protocol.AckRequest
	require.NoError(t, json.Unmarshal([]byte(`{"acks":[{"lease":"l"},{"offset":0,"lease":"l"}]}`), &ack))
	require.Nil(t, ack.Acks[0].Offset, "a missing offset is told from 0")
	require.Equal(t, int64(0), *ack.Acks[1].Offset)

	var push protocol.PushRequest
	require.NoError(t, json.Unmarshal([]byte(`{"messages":[{"data": {"a" : 1}},{"data_b64":""},{"data":null}]}`), &push))
	require.Equal(t, `{"a" : 1}`, string(push.Messages[0].Data), "data is kept byte for byte")
	require.NotNil(t, push.Messages[1].DataB64, "an empty message is data_b64 \"\"")
	require.Empty(t, *push.Messages[1].DataB64)
	require.Equal(t, "null", string(push.Messages[2].Data), "null is a message too")

	// docs/protocol.md: a spooled result has no offset field. Decoding
	// one gives offset 0; encoding a PushResult always writes the offset
	// (0 is a real one), so only a hand-written reply can leave it out.
	var rep protocol.PushReply
	require.NoError(t, json.Unmarshal([]byte(`{"results":[{"partition":"eu","status":"spooled"}]}`), &rep))
	require.Equal(t, protocol.PushResult{Partition: "eu", Status: protocol.StatusSpooled}, rep.Results[0])
}

// TestJSONFieldsDocumented checks that every JSON field of every shape is
// named in docs/protocol.md, so the page and the types cannot drift apart
// unnoticed.
func TestJSONFieldsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/protocol.md")
	require.NoError(t, err)
	for _, v := range []any{
		protocol.PushRequest{}, protocol.PushMessage{}, protocol.PushReply{}, protocol.PushResult{},
		protocol.PopRequest{}, protocol.PopReply{}, protocol.Delivery{},
		protocol.AckRequest{}, protocol.Ack{}, protocol.AckReply{}, protocol.AckResult{},
		protocol.RenewRequest{}, protocol.RenewReply{}, protocol.RenewResult{},
		protocol.TxnRequest{}, protocol.TxnAck{}, protocol.TxnPush{}, protocol.TxnReply{},
		protocol.QueueConfig{}, protocol.ConfigPatch{}, protocol.Info{}, protocol.PartitionInfo{}, protocol.GroupInfo{},
		protocol.InfoRequest{}, protocol.ListRequest{}, protocol.ListReply{}, protocol.QueueSummary{},
		protocol.DLQRequest{}, protocol.DLQReply{}, protocol.DoneReply{}, protocol.DeadLetter{},
		protocol.SeekRequest{}, protocol.SeekReply{}, protocol.GroupsRequest{}, protocol.GroupsReply{}, protocol.GroupState{}, protocol.PeekRequest{}, protocol.PeekReply{}, protocol.PeekedMessage{}, protocol.OKReply{}, protocol.ErrorReply{}, protocol.ErrorBody{},
	} {
		typ := reflect.TypeOf(v)
		for f := range typ.Fields() {
			if f.Anonymous {
				continue // an embedded shape (TxnAck's Ack) is checked on its own
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			require.NotEmpty(t, name, "%s.%s has no JSON name", typ.Name(), f.Name)
			require.True(t, bytes.Contains(doc, []byte(`"`+name+`"`)) || bytes.Contains(doc, []byte("`"+name+"`")),
				"%s.%s: field %q is not in docs/protocol.md", typ.Name(), f.Name, name)
		}
	}
	// And the statuses and verbs, which clients compare against.
	for _, s := range slices.Concat(protocol.Verbs, []string{
		protocol.StatusStored, protocol.StatusDuplicate, protocol.StatusSpooled,
		protocol.AckCompleted, protocol.AckRetry, protocol.AckFailed, protocol.AckDead,
		protocol.FromAll, protocol.FromNew, protocol.SeekStart, protocol.SeekEnd,
		protocol.HeaderPartition, protocol.HeaderID, protocol.HeaderError, protocol.HeaderErrorCode,
		protocol.HeaderDelayMS, protocol.HeaderNotBefore,
	}) {
		require.True(t, bytes.Contains(doc, []byte("`"+s+"`")) || bytes.Contains(doc, []byte(`"`+s+`"`)) ||
			bytes.Contains(doc, []byte("comb."+s)), "%q is not in docs/protocol.md", s)
	}
}

// TestHeaderValues: a pushed header value may be one string or an array of
// strings; replies always write arrays.
func TestHeaderValues(t *testing.T) {
	t.Parallel()
	var m protocol.PushMessage
	require.NoError(t, json.Unmarshal([]byte(`{"headers":{"a":"1","b":["2","3"],"c":null}}`), &m))
	require.Equal(t, protocol.Headers{"a": {"1"}, "b": {"2", "3"}, "c": nil}, m.Headers)
	require.Error(t, json.Unmarshal([]byte(`{"headers":{"a":1}}`), &m))
	require.Error(t, json.Unmarshal([]byte(`{"headers":{"a":[1]}}`), &m))
	b, err := json.Marshal(protocol.Delivery{Headers: protocol.Headers{"a": {"1"}}})
	require.NoError(t, err)
	require.Contains(t, string(b), `"headers":{"a":["1"]}`)
}
