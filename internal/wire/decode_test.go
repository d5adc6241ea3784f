package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// requireWireError checks that err is an *Error with code whose message
// contains every one of want.
func requireWireError(t *testing.T, err error, code int, want ...string) {
	t.Helper()
	require.Error(t, err)
	we, ok := protocol.AsError(err)
	require.True(t, ok, "not a wire error: %v", err)
	require.Equal(t, code, we.Code, we.Message)
	for _, w := range want {
		require.Contains(t, we.Message, w)
	}
}

func TestDecodePush(t *testing.T) {
	t.Parallel()
	body := `{"messages":[{"partition":"eu","id":"order-7","data":{"sku": 42 , "x":[1,2]}},
	           {"data_b64":"AAEC"}, {"data_b64":""}, {"data":"str"}, {"data":null}, {"data_b64":"AAE"}]}`
	msgs, err := DecodePush([]byte(body), DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, []domain.PushMessage{
		{Partition: "eu", ID: "order-7", Data: []byte(`{"sku": 42 , "x":[1,2]}`), Encoding: domain.EncodingJSON},
		{Partition: "default", Data: []byte{0, 1, 2}, Encoding: domain.EncodingBinary},
		{Partition: "default", Data: []byte{}, Encoding: domain.EncodingBinary},
		{Partition: "default", Data: []byte(`"str"`), Encoding: domain.EncodingJSON},
		{Partition: "default", Data: []byte(`null`), Encoding: domain.EncodingJSON},
		{Partition: "default", Data: []byte{0, 1}, Encoding: domain.EncodingBinary},
	}, msgs)
}

func TestDecodePushErrors(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxMessageBytes: 4, MaxRequestBytes: 300}
	cases := []struct {
		body string
		code int
		want []string
	}{
		{``, 400, []string{"at least one message"}},
		{`{}`, 400, []string{"at least one message"}},
		{`{"messages":[]}`, 400, []string{"at least one message"}},
		{`[]`, 400, []string{"must be a JSON object"}},
		{`null`, 400, []string{"must be a JSON object"}},
		{`{"messages":[{"data":1}]`, 400, []string{"malformed JSON", "end of input"}},
		{`{"messages":[{"data":1,}]}`, 400, []string{"malformed JSON at byte"}},
		{`{"messages":[{"data":1}]} x`, 400, []string{"unexpected data after the object"}},
		{`{"messages":[{"data":1}]}{}`, 400, []string{"unexpected data after the object"}},
		{`{"mesages":[{"data":1}]}`, 400, []string{`unknown field "mesages"`}},
		{`{"messages":[{"data":1},{"data":2,"parition":"x"}]}`, 400, []string{`messages[1]: unknown field "parition"`}},
		{`{"messages":[{"data":1},{"data_b64":5}]}`, 400, []string{"messages[1].data_b64: expected a string, got number"}},
		{`{"messages":{"data":1}}`, 400, []string{"messages: expected an array, got object"}},
		{`{"messages":[{"data":1,"data_b64":"AA=="}]}`, 400, []string{"messages[0]: both data and data_b64"}},
		{`{"messages":[{"id":"x"}]}`, 400, []string{"messages[0]: one of data or data_b64 is required"}},
		{`{"messages":[{"data_b64":null}]}`, 400, []string{"one of data or data_b64"}},
		{`{"messages":[{"data_b64":"!!!!"}]}`, 400, []string{"messages[0].data_b64: illegal base64"}},
		{`{"messages":[{"data":1,"partition":"a\nb"}]}`, 400, []string{"messages[0].partition: control character"}},
		{`{"messages":[{"data":1,"id":"` + strings.Repeat("i", 256) + `"}]}`, 400, []string{"messages[0].id: 256 bytes"}},
		{`{"messages":[{"data":"abcd"}]}`, 413, []string{"messages[0]: message is 6 bytes, over the limit of 4"}},
		{`{"messages":[{"data_b64":"AAECAwQ="}]}`, 413, []string{"message is 5 bytes"}},
		{`{"messages":[{"data":"` + strings.Repeat("x", 300) + `"}]}`, 413, []string{"request is", "over the limit of 300"}},
	}
	for _, c := range cases {
		_, err := DecodePush([]byte(c.body), lim)
		requireWireError(t, err, c.code, c.want...)
	}
	many := `{"messages":[` + strings.Repeat(`{"data":1},`, protocol.MaxPushMessages) + `{"data":1}]}`
	_, err := DecodePush([]byte(many), DefaultLimits())
	requireWireError(t, err, 413, "10001 messages")
}

func TestDecodePut(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = append(m[kv[i]], kv[i+1])
		}
		return m
	}
	m, err := DecodePut([]byte("raw \x00 bytes"), h("Comb-Partition", "eu", "Comb-Id", "id-1"), DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, domain.PushMessage{Partition: "eu", ID: "id-1", Data: []byte("raw \x00 bytes"), Encoding: domain.EncodingBinary}, m)

	m, err = DecodePut(nil, nil, DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, domain.PushMessage{Partition: "default", Data: []byte{}, Encoding: domain.EncodingBinary}, m)

	// Option names match without regard to case; every other header is
	// kept, in canonical form, and counts toward the size.
	m, err = DecodePut([]byte(`{"a":1}`), h("comb-partition", "eu", "COMB-DELAY-MS", "1500", "X-B", "2", "traceparent", "00-ab-cd-01", "X-B", "3"), DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, "eu", m.Partition)
	require.Equal(t, int64(1500), m.DelayMS)
	require.Equal(t, `{"X-B":["2","3"],"traceparent":["00-ab-cd-01"]}`, string(m.Headers))
	require.Equal(t, domain.EncodingJSON, m.Encoding)

	m, err = DecodePut([]byte("x"), h("Comb-Not-Before", "2026-12-01T10:00:00Z"), DefaultLimits())
	require.NoError(t, err)
	require.True(t, m.NotBefore.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)))

	_, err = DecodePut([]byte("12345"), nil, Limits{MaxMessageBytes: 4})
	requireWireError(t, err, 413, "message is 5 bytes")
	_, err = DecodePut([]byte("12"), h("X", "123"), Limits{MaxMessageBytes: 4})
	requireWireError(t, err, 413, "with its headers")
	for _, c := range []struct {
		h    map[string][]string
		want string
	}{
		{h("Comb-Partition", "a\tb"), "Comb-Partition header: control character"},
		{h("Comb-Id", "\x01"), "Comb-Id header: control character"},
		{h("Comb-Partiton", "eu"), "header Comb-Partiton: unknown"},
		{h("Comb-Delay-Ms", "soon"), `Comb-Delay-Ms header: "soon" is not a whole number`},
		{h("Comb-Delay-Ms", "-5"), "Comb-Delay-Ms header: -5 is out of range"},
		{h("Comb-Delay-Ms", "1", "Comb-Not-Before", "2026-12-01T10:00:00Z"), "Comb-Delay-Ms header: given with Comb-Not-Before header; send at most one"},
		{h("Comb-Not-Before", "tomorrow"), `Comb-Not-Before header: "tomorrow" is not an RFC 3339 time`},
		{h("Comb-Not-Before", "2126-12-01T10:00:00Z"), "Comb-Not-Before header: 2126-12-01T10:00:00Z is more than"},
		{h("X", "a\rb"), `headers: "X": value holds a CR, LF or NUL at byte 1`},
		{h("X", "\xff"), `headers: "X": value is not valid UTF-8`},
		{h("X:Y", "1"), `headers: name "X:Y": byte 1 is not printable ASCII`},
	} {
		_, err := DecodePut([]byte("x"), c.h, DefaultLimits())
		requireWireError(t, err, 400, c.want)
	}
}

func TestDecodePushExtras(t *testing.T) {
	t.Parallel()
	msgs, err := DecodePush([]byte(`{"messages":[
		{"data":1,"headers":{"traceparent":"00-ab-cd-01","X-Multi":["a","b"],"A":""}},
		{"data":2,"delay_ms":5000},
		{"data":3,"not_before":"2026-12-01T10:00:00.5+01:00"},
		{"data":4,"headers":null,"delay_ms":null}]}`), DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, `{"A":[""],"X-Multi":["a","b"],"traceparent":["00-ab-cd-01"]}`, string(msgs[0].Headers))
	require.False(t, msgs[0].Delayed())
	require.Equal(t, int64(5000), msgs[1].DelayMS)
	require.True(t, msgs[2].NotBefore.Equal(time.Date(2026, 12, 1, 9, 0, 0, 5e8, time.UTC)))
	require.Nil(t, msgs[3].Headers)
	require.False(t, msgs[3].Delayed())

	for body, want := range map[string]string{
		`{"messages":[{"data":1,"headers":[]}]}`:                                     "messages[0].headers: expected an object of strings or arrays of strings",
		`{"messages":[{"data":1,"headers":{"a":1}}]}`:                                "messages[0].headers.a: expected a string or an array of strings, got number",
		`{"messages":[{"data":1,"headers":{"a":[]}}]}`:                               `messages[0].headers: "a" has no value`,
		`{"messages":[{"data":1,"headers":{"Comb-Id":"x"}}]}`:                        `messages[0].headers: "Comb-Id": names starting with "Comb-" are reserved`,
		`{"messages":[{"data":1,"headers":{"":"x"}}]}`:                               `messages[0].headers: name "": must be 1 to 255 bytes`,
		`{"messages":[{"data":1,"headers":{"a":"\ud800"}}]}`:                         "messages[0].headers.a: a lone surrogate",
		`{"messages":[{"data":1},{"data":1,"delay_ms":-1}]}`:                         "messages[1].delay_ms: -1 is out of range 0..604800000",
		`{"messages":[{"data":1,"delay_ms":604800001}]}`:                             "messages[0].delay_ms: 604800001 is out of range",
		`{"messages":[{"data":1,"delay_ms":1.5}]}`:                                   "messages[0].delay_ms: expected a whole number",
		`{"messages":[{"data":1,"not_before":5}]}`:                                   "messages[0].not_before: expected a string",
		`{"messages":[{"data":1,"not_before":"monday"}]}`:                            `messages[0].not_before: "monday" is not an RFC 3339 time`,
		`{"messages":[{"data":1,"delay_ms":1,"not_before":"2026-12-01T10:00:00Z"}]}`: "messages[0].delay_ms: given with not_before",
	} {
		_, err := DecodePush([]byte(body), DefaultLimits())
		requireWireError(t, err, 400, want)
	}
	_, err = DecodePush([]byte(`{"messages":[{"data":12,"headers":{"X":"abc"}}]}`), Limits{MaxMessageBytes: 10})
	requireWireError(t, err, 413, "messages[0]: message is 15 bytes")
	var many strings.Builder
	for i := 0; i <= protocol.MaxHeaders; i++ {
		fmt.Fprintf(&many, `"h%d":"v",`, i)
	}
	_, err = DecodePush([]byte(`{"messages":[{"data":1,"headers":{`+strings.TrimSuffix(many.String(), ",")+`}}]}`), DefaultLimits())
	requireWireError(t, err, 413, "headers: 101 names, at most 100")
}

func TestDecodePop(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, ` `, `{}`, "\n{ }\n"} {
		p, err := DecodePop([]byte(body))
		require.NoError(t, err)
		require.Equal(t, Pop{Params: domain.PopParams{
			Group: "default", Max: 100, Partitions: 1, From: domain.Start{Kind: domain.StartAll},
		}}, p)
	}
	p, err := DecodePop([]byte(`{"group":"billing","partition":"eu","max":10000,"partitions":1,"wait_ms":5000,
		"lease_ms":30000,"auto_ack":true,"from":"new"}`))
	require.NoError(t, err)
	require.Equal(t, Pop{Wait: 5 * time.Second, Params: domain.PopParams{
		Group: "billing", Partition: "eu", Max: 10000, Partitions: 1, LeaseMS: 30000, AutoAck: true,
		From: domain.Start{Kind: domain.StartNew},
	}}, p)

	p, err = DecodePop([]byte(`{"from":"2026-11-30T10:00:00.5+01:00","partitions":1000,"lease_ms":0,"wait_ms":0}`))
	require.NoError(t, err)
	require.Equal(t, domain.StartTime, p.Params.From.Kind)
	require.True(t, p.Params.From.Time.Equal(time.Date(2026, 11, 30, 9, 0, 0, 5e8, time.UTC)))
	require.Equal(t, 1000, p.Params.Partitions)

	// Acks ride along, checked as an ack request's are.
	p, err = DecodePop([]byte(`{"group":"g","acks":[{"partition":"eu","offset":17,"lease":"l-9f2c"},
		{"offset":3,"lease":"l-1","status":"failed","delay_ms":10,"error":"timeout"}]}`))
	require.NoError(t, err)
	ten := int64(10)
	require.Equal(t, []domain.Ack{
		{Partition: "eu", Offset: 17, Lease: "l-9f2c", Status: domain.AckCompleted},
		{Partition: "default", Offset: 3, Lease: "l-1", Status: domain.AckFailed, DelayMS: &ten, Error: "timeout"},
	}, p.Acks)
	p, err = DecodePop([]byte(`{"acks":[]}`))
	require.NoError(t, err)
	require.Nil(t, p.Acks)
	_, err = DecodeNamespacePop([]byte(`{"acks":[{"offset":0,"lease":"l"}]}`))
	requireWireError(t, err, 400, "acks: not allowed in a namespace pop")

	bad := map[string]string{
		`{"acks":[{"lease":"l"}]}`:                           "acks[0].offset: required",
		`{"acks":[{"offset":0,"lease":"l"},{"offset":"1"}]}`: "acks[1].offset",
		`{"acks":[{"offset":0,"lease":"l","status":"x"}]}`:   "acks[0].status: unknown status",
		`{"acks":[{"offset":0,"lease":"l","delay_ms":5}]}`:   "acks[0].delay_ms: only with status retry or failed",
		`{"max":0}`:                         "max: 0 is out of range 1..10000",
		`{"max":10001}`:                     "max: 10001 is out of range",
		`{"max":1.5}`:                       "max: expected an integer, got number 1.5",
		`{"max":"5"}`:                       "max: expected an integer, got string",
		`{"partitions":0}`:                  "partitions: 0 is out of range 1..1000",
		`{"partitions":1001}`:               "partitions: 1001",
		`{"partition":"eu","partitions":2}`: "partitions: must be 1 when a partition is named",
		`{"wait_ms":-1}`:                    "wait_ms: -1 is out of range 0..300000",
		`{"wait_ms":300001}`:                "wait_ms: 300001",
		`{"lease_ms":99}`:                   "lease_ms: 99 is out of range: 0 (the queue's lease) or 100..86400000",
		`{"lease_ms":86400001}`:             "lease_ms: 86400001",
		`{"from":"yesterday"}`:              `from: "yesterday" is not all, new or an RFC 3339 time`,
		`{"group":"a\u0000b"}`:              "group: control character",
		`{"partition":"a\u0007"}`:           "partition: control character",
		`{"wait":100}`:                      `unknown field "wait"`,
		`{"auto_ack":"yes"}`:                "auto_ack: expected true or false, got string",
	}
	for body, want := range bad {
		_, err := DecodePop([]byte(body))
		requireWireError(t, err, 400, want)
	}
}

func TestDecodeAck(t *testing.T) {
	t.Parallel()
	group, acks, err := DecodeAck([]byte(`{"group":"billing","acks":[
		{"partition":"eu","offset":17,"lease":"l-9f2c","status":"completed"},
		{"offset":0,"lease":"l-1"},
		{"offset":3,"lease":"l-1","status":"retry"},
		{"offset":4,"lease":"l-1","status":"failed"},
		{"offset":5,"lease":"l-1","status":"dead"}]}`))
	require.NoError(t, err)
	require.Equal(t, "billing", group)
	require.Equal(t, []domain.Ack{
		{Partition: "eu", Offset: 17, Lease: "l-9f2c", Status: domain.AckCompleted},
		{Partition: "default", Offset: 0, Lease: "l-1", Status: domain.AckCompleted},
		{Partition: "default", Offset: 3, Lease: "l-1", Status: domain.AckRetry},
		{Partition: "default", Offset: 4, Lease: "l-1", Status: domain.AckFailed},
		{Partition: "default", Offset: 5, Lease: "l-1", Status: domain.AckDead},
	}, acks)

	// Retry delays and error texts, where the status allows them.
	_, acks, err = DecodeAck([]byte(`{"acks":[
		{"offset":1,"lease":"l","status":"failed","delay_ms":1500,"error":"upstream said 503"},
		{"offset":2,"lease":"l","status":"retry","delay_ms":0},
		{"offset":3,"lease":"l","status":"dead","error":"bad schema: \u00e9"},
		{"offset":4,"lease":"l","status":"failed","delay_ms":604800000}]}`))
	require.NoError(t, err)
	d1500, d0, dMax := int64(1500), int64(0), int64(protocol.MaxDelayMS)
	require.Equal(t, []domain.Ack{
		{Partition: "default", Offset: 1, Lease: "l", Status: domain.AckFailed, DelayMS: &d1500, Error: "upstream said 503"},
		{Partition: "default", Offset: 2, Lease: "l", Status: domain.AckRetry, DelayMS: &d0},
		{Partition: "default", Offset: 3, Lease: "l", Status: domain.AckDead, Error: "bad schema: é"},
		{Partition: "default", Offset: 4, Lease: "l", Status: domain.AckFailed, DelayMS: &dMax},
	}, acks)

	group, _, err = DecodeAck([]byte(`{"acks":[{"offset":1,"lease":"l"}]}`))
	require.NoError(t, err)
	require.Equal(t, "default", group)

	bad := map[string]string{
		``:            "acks: at least one ack",
		`{"acks":[]}`: "acks: at least one ack",
		`{"acks":[{"offset":1,"lease":"l"},{"offset":2,"lease":"l","status":"done"}]}`: `acks[1].status: unknown status "done"; want completed, retry, failed or dead`,
		`{"acks":[{"lease":"l"}]}`:                             "acks[0].offset: required",
		`{"acks":[{"offset":-1,"lease":"l"}]}`:                 "acks[0].offset: -1 is negative",
		`{"acks":[{"offset":1}]}`:                              "acks[0].lease: required",
		`{"acks":[{"offset":1,"lease":"l","partition":""}]}`:   "",
		`{"acks":[{"offset":1,"lease":"l","partition":"\n"}]}`: "acks[0].partition: control character",
		`{"acks":[{"offset":1,"lease":"l","stauts":"dead"}]}`:  `acks[0]: unknown field "stauts"`,
		`{"acks":[{"offset":"1","lease":"l"}]}`:                "acks[0].offset: expected an integer, got string",
		`{"group":"","acks":[{"offset":1,"lease":"l"}],"x":1}`: `unknown field "x"`,
		// delay_ms: only on retry and failed, and within 0..MaxDelayMS.
		`{"acks":[{"offset":1,"lease":"l","delay_ms":100}]}`:                                        "acks[0].delay_ms: only with status retry or failed",
		`{"acks":[{"offset":1,"lease":"l","status":"completed","delay_ms":0}]}`:                     "acks[0].delay_ms: only with status retry or failed",
		`{"acks":[{"offset":1,"lease":"l"},{"offset":2,"lease":"l","status":"dead","delay_ms":1}]}`: "acks[1].delay_ms: only with status retry or failed",
		`{"acks":[{"offset":1,"lease":"l","status":"failed","delay_ms":-1}]}`:                       "acks[0].delay_ms: -1 is out of range 0..604800000",
		`{"acks":[{"offset":1,"lease":"l","status":"retry","delay_ms":604800001}]}`:                 "acks[0].delay_ms: 604800001 is out of range 0..604800000",
		`{"acks":[{"offset":1,"lease":"l","status":"retry","delay_ms":1.5}]}`:                       "acks[0].delay_ms: expected an integer",
		`{"acks":[{"offset":1,"lease":"l","status":"retry","delay_ms":"5"}]}`:                       "acks[0].delay_ms: expected an integer, got string",
		// error: only on failed and dead, printable and bounded.
		`{"acks":[{"offset":1,"lease":"l","error":"x"}]}`:                                                 "acks[0].error: only with status failed or dead",
		`{"acks":[{"offset":1,"lease":"l","status":"retry","error":"x"}]}`:                                "acks[0].error: only with status failed or dead",
		`{"acks":[{"offset":1,"lease":"l","status":"failed","error":"a\nb"}]}`:                            "acks[0].error: control character",
		`{"acks":[{"offset":1,"lease":"l","status":"dead","error":"a\u0000b"}]}`:                          "acks[0].error: control character",
		`{"acks":[{"offset":1,"lease":"l","status":"dead","error":"\ud800"}]}`:                            "acks[0].error",
		`{"acks":[{"offset":1,"lease":"l","status":"dead","error":"` + strings.Repeat("e", 1025) + `"}]}`: "acks[0].error: 1025 bytes, at most 1024 allowed",
		`{"acks":[{"offset":1,"lease":"l","status":"dead","error":"` + strings.Repeat("e", 1024) + `"}]}`: "",
		`{"acks":[{"offset":1,"lease":"l","status":"dead","error":""}]}`:                                  "",
	}
	for body, want := range bad {
		_, _, err := DecodeAck([]byte(body))
		if want == "" {
			require.NoError(t, err, body)
			continue
		}
		requireWireError(t, err, 400, want)
	}
}

func TestDecodeRenew(t *testing.T) {
	t.Parallel()
	leases, ms, err := DecodeRenew([]byte(`{"leases":["l-9f2c","l-2"],"lease_ms":30000}`))
	require.NoError(t, err)
	require.Equal(t, []string{"l-9f2c", "l-2"}, leases)
	require.EqualValues(t, 30000, ms)
	_, ms, err = DecodeRenew([]byte(`{"leases":["l"]}`))
	require.NoError(t, err)
	require.Zero(t, ms)

	for body, want := range map[string]string{
		`{}`:                             "leases: at least one lease",
		`{"leases":["l",""]}`:            "leases[1]: required",
		`{"leases":["l"],"lease_ms":50}`: "lease_ms: 50 is out of range",
		`{"leases":"l"}`:                 "leases: expected an array, got string",
		`{"leases":["l"],"lease":1}`:     `unknown field "lease"`,
	} {
		_, _, err := DecodeRenew([]byte(body))
		requireWireError(t, err, 400, want)
	}
}

func TestDecodeConfigure(t *testing.T) {
	t.Parallel()
	p, err := DecodeConfigure(nil)
	require.NoError(t, err)
	require.Equal(t, domain.ConfigPatch{}, p)

	p, err = DecodeConfigure([]byte(`{"lease_ms":1000,"max_attempts":5,"dead_letter":false,"dedup_window_s":60,
		"completed_retention_s":3600,"max_age_s":86400,"delay_ms":10,"max_messages":0,"max_bytes":1000000,
		"max_message_bytes":8388608}`))
	require.NoError(t, err)
	require.EqualValues(t, 1000, *p.LeaseMS)
	require.EqualValues(t, 5, *p.MaxAttempts)
	require.False(t, *p.DeadLetter)
	require.EqualValues(t, 60, *p.DedupWindowS)
	require.EqualValues(t, 3600, *p.CompletedRetentionS)
	require.EqualValues(t, 86400, *p.MaxAgeS)
	require.EqualValues(t, 10, *p.DelayMS)
	require.EqualValues(t, 0, *p.MaxMessages)
	require.EqualValues(t, 1000000, *p.MaxBytes)
	require.EqualValues(t, 8<<20, *p.MaxMessageBytes)

	p, err = DecodeConfigure([]byte(`{"max_attempts":2,"lease_ms":null}`))
	require.NoError(t, err)
	require.Nil(t, p.LeaseMS, "null leaves a setting as it is")
	require.EqualValues(t, 2, *p.MaxAttempts)

	for body, want := range map[string]string{
		`{"lease_ms":0}`:                 "lease_ms: 0 is out of range 100..86400000",
		`{"max_attempts":0}`:             "max_attempts: 0 is out of range 1..1000",
		`{"dedup_window_s":-1}`:          "dedup_window_s: -1",
		`{"dedup_window_s":604801}`:      "dedup_window_s: 604801",
		`{"completed_retention_s":-5}`:   "completed_retention_s: -5",
		`{"max_age_s":315360001}`:        "max_age_s: 315360001",
		`{"delay_ms":604800001}`:         "delay_ms: 604800001",
		`{"max_messages":-1}`:            "max_messages: -1",
		`{"max_bytes":9007199254740992}`: "max_bytes: 9007199254740992",
		`{"max_message_bytes":0}`:        "max_message_bytes: 0 is out of range 1..8388608",
		`{"max_message_bytes":8388609}`:  "max_message_bytes: 8388609",
		`{"lease":100}`:                  `unknown field "lease"`,
		`{"dead_letter":1}`:              "dead_letter: expected true or false, got number",
		`{"lease_ms":"100"}`:             "lease_ms: expected an integer, got string",
	} {
		_, err := DecodeConfigure([]byte(body))
		requireWireError(t, err, 400, want)
	}
}

func TestDecodeEmpty(t *testing.T) {
	t.Parallel()
	require.NoError(t, DecodeEmpty(nil))
	require.NoError(t, DecodeEmpty([]byte(` {} `)))
	requireWireError(t, DecodeEmpty([]byte(`{"force":true}`)), 400, `unknown field "force"`)
	requireWireError(t, DecodeEmpty([]byte(`x`)), 400, "JSON object")
}

func TestDecodeDLQ(t *testing.T) {
	t.Parallel()
	d, err := DecodeDLQ(nil)
	require.NoError(t, err)
	require.Equal(t, DLQ{Op: DLQList, Params: domain.DLQParams{Limit: 100}}, d)
	d, err = DecodeDLQ([]byte(`{"group":"billing","limit":10,"after":"c-1"}`))
	require.NoError(t, err)
	require.Equal(t, DLQ{Op: DLQList, Params: domain.DLQParams{Group: "billing", Limit: 10, After: "c-1"}}, d)
	d, err = DecodeDLQ([]byte(`{"replay":["d-31","d-32"]}`))
	require.NoError(t, err)
	require.Equal(t, DLQ{Op: DLQReplay, IDs: []string{"d-31", "d-32"}}, d)
	d, err = DecodeDLQ([]byte(`{"purge":["d-1"]}`))
	require.NoError(t, err)
	require.Equal(t, DLQ{Op: DLQPurge, IDs: []string{"d-1"}}, d)

	for body, want := range map[string]string{
		`{"replay":["a"],"purge":["b"]}`: "replay and purge given",
		`{"replay":["a"],"group":"g"}`:   "replay: takes no group",
		`{"purge":[]}`:                   "purge: at least one dlq_id",
		`{"purge":[""]}`:                 "purge[0]: not a dlq_id",
		`{"limit":0}`:                    "limit: 0 is out of range 1..1000",
		`{"limit":1001}`:                 "limit: 1001",
		`{"group":"\u0001"}`:             "group: control character",
		`{"replay":"d-1"}`:               "replay: expected an array, got string",
		`{"delete":["d-1"]}`:             `unknown field "delete"`,
	} {
		_, err := DecodeDLQ([]byte(body))
		requireWireError(t, err, 400, want)
	}
}

func TestErrorBody(t *testing.T) {
	t.Parallel()
	require.Equal(t, `{"error":{"code":400,"message":"bad \"name\"\n"}}`, string(ErrorBody(400, "bad \"name\"\n", 0)))
	var body protocol.ErrorReply
	require.NoError(t, json.Unmarshal(ErrorBody(413, "too big: <5>", 0), &body))
	require.Equal(t, protocol.ErrorBody{Code: 413, Message: "too big: <5>"}, body.Error)
	require.Equal(t, `{"error":{"code":429,"message":"slow down","retry_after_ms":250}}`, string(ErrorBody(429, "slow down", 250)))
}

func TestDecodePeek(t *testing.T) {
	t.Parallel()
	p, err := DecodePeek(nil)
	require.NoError(t, err)
	require.Equal(t, domain.PeekParams{Partition: "default", Limit: 100}, p)
	p, err = DecodePeek([]byte(`{"partition":"eu","from":7,"limit":1000}`))
	require.NoError(t, err)
	require.Equal(t, domain.PeekParams{Partition: "eu", From: 7, Limit: 1000}, p)
	p, err = DecodePeek([]byte(`{"partition":"eu","id":"order-8"}`))
	require.NoError(t, err)
	require.Equal(t, domain.PeekParams{Partition: "eu", ID: "order-8", Limit: 1}, p)

	for body, want := range map[string]string{
		`{"from":-1}`:            "from: -1 is negative",
		`{"from":"0"}`:           "from: expected an integer, got string",
		`{"limit":0}`:            "limit: 0 is out of range 1..1000",
		`{"limit":1001}`:         "limit: 1001 is out of range 1..1000",
		`{"id":"x","from":0}`:    "id: takes no from or limit",
		`{"id":"x","limit":5}`:   "id: takes no from or limit",
		`{"partition":"\u0001"}`: "partition: control character",
		`{"id":"\ud800"}`:        "id:",
		`{"group":"g"}`:          `unknown field "group"`,
		`[]`:                     "",
	} {
		_, err := DecodePeek([]byte(body))
		we, ok := protocol.AsError(err)
		require.True(t, ok, "%s: %v", body, err)
		require.Equal(t, 400, we.Code, body)
		require.Contains(t, we.Message, want, body)
	}
}

func TestPeekReplyTrims(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	page := domain.PeekPage{Next: -1}
	for i := range 10 {
		page.Messages = append(page.Messages, domain.Message{Partition: "eu", Offset: int64(i), ID: fmt.Sprint("m", i),
			CreatedAt: at, Data: bytes.Repeat([]byte{0xff}, 100), Encoding: domain.EncodingBinary})
	}
	full, n := PeekReply(page, 0)
	require.Equal(t, 10, n)
	var rep protocol.PeekReply
	require.NoError(t, json.Unmarshal(full, &rep))
	require.Len(t, rep.Messages, 10)
	require.Nil(t, rep.Next)
	require.Equal(t, "m3", rep.Messages[3].ID)
	require.NotNil(t, rep.Messages[3].DataB64)

	// Cut to fit: next is the first offset left out.
	limit := len(full) / 2
	part, n := PeekReply(page, limit)
	require.LessOrEqual(t, len(part), limit)
	require.Greater(t, n, 0)
	require.Less(t, n, 10)
	rep = protocol.PeekReply{}
	require.NoError(t, json.Unmarshal(part, &rep))
	require.Len(t, rep.Messages, n)
	require.NotNil(t, rep.Next)
	require.Equal(t, int64(n), *rep.Next)
}
