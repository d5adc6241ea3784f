package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire/wiretest"
	"github.com/combmq/comb/protocol"
)

func TestDecodeTxn(t *testing.T) {
	t.Parallel()
	p, err := DecodeTxn([]byte(`{"acks":[
		{"queue":"in","group":"g","partition":"p","offset":3,"lease":"l-1-ab"},
		{"queue":"a.b","offset":0,"lease":"l-2-cd","status":"failed"}],
	  "push":[{"queue":"out","messages":[{"id":"x","data":{"n": 1}},{"partition":"eu","data_b64":"AAEC"}]},
	          {"queue":"side","messages":[{"data":"\u00e9"}]}]}`), DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, []domain.TxnAck{
		{Queue: domain.Global("in"), Group: "g", Ack: domain.Ack{Partition: "p", Offset: 3, Lease: "l-1-ab"}},
		{Queue: domain.Global("a.b"), Group: "default", Ack: domain.Ack{Partition: "default", Offset: 0, Lease: "l-2-cd", Status: domain.AckFailed}},
	}, p.Acks)
	require.Equal(t, []domain.PushParams{
		{Queue: domain.Global("out"), Messages: []domain.PushMessage{
			{Partition: "default", ID: "x", Data: []byte(`{"n": 1}`), Encoding: domain.EncodingJSON},
			{Partition: "eu", Data: []byte{0, 1, 2}, Encoding: domain.EncodingBinary},
		}},
		{Queue: domain.Global("side"), Messages: []domain.PushMessage{{Partition: "default", Data: []byte(`"\u00e9"`), Encoding: domain.EncodingJSON}}},
	}, p.Push)

	// An ack's retry delay and error text come along, checked as an ack's.
	p, err = DecodeTxn([]byte(`{"acks":[{"queue":"in","offset":1,"lease":"l","status":"failed","delay_ms":500,"error":"timeout"}]}`), DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, int64(500), *p.Acks[0].DelayMS)
	require.Equal(t, "timeout", p.Acks[0].Error)
	_, err = DecodeTxn([]byte(`{"acks":[{"queue":"in","offset":1,"lease":"l","delay_ms":5}]}`), DefaultLimits())
	requireWireError(t, err, 400, "acks[0].delay_ms: only with status retry or failed")

	// Acks alone, pushes alone.
	p, err = DecodeTxn([]byte(`{"acks":[{"queue":"in","offset":1,"lease":"l"}]}`), DefaultLimits())
	require.NoError(t, err)
	require.Len(t, p.Acks, 1)
	require.Empty(t, p.Push)
	p, err = DecodeTxn([]byte(`{"push":[{"queue":"o","messages":[{"data_b64":""}]}]}`), DefaultLimits())
	require.NoError(t, err)
	require.Empty(t, p.Acks)
	require.Equal(t, []byte{}, p.Push[0].Messages[0].Data)

	bad := map[string]string{
		``:                                    "at least one ack or push is required",
		`{}`:                                  "at least one ack or push is required",
		`{"acks":[],"push":[]}`:               "at least one ack or push is required",
		`[]`:                                  "request body must be a JSON object",
		`{"ack":[]}`:                          `unknown field "ack"`,
		`{"acks":[{"offset":1,"lease":"l"}]}`: "acks[0].queue: required",
		`{"acks":[{"queue":"a..b","offset":1,"lease":"l"}]}`:                       "acks[0].queue name",
		`{"acks":[{"queue":"q","lease":"l"}]}`:                                     "acks[0].offset: required",
		`{"acks":[{"queue":"q","offset":1,"lease":"l"},{"queue":"q","offset":1}]}`: "acks[1].lease: required",
		`{"acks":[{"queue":"q","offset":1,"lease":"l","status":"done"}]}`:          `acks[0].status: unknown status "done"`,
		`{"acks":[{"queue":"q","offset":"1","lease":"l"}]}`:                        "acks[0].offset: expected an integer, got string",
		`{"acks":[{"queue":"q","offset":1,"lease":"l","stauts":"dead"}]}`:          `acks[0]: unknown field "stauts"`,
		`{"acks":[{"queue":"q","group":"\ud800","offset":1,"lease":"l"}]}`:         "acks[0].group: a lone surrogate",
		`{"acks":[{"queue":"q","group":"a\nb","offset":1,"lease":"l"}]}`:           "acks[0].group: control character",
		`{"acks":[null]}`:                      "acks[0]: expected an object",
		`{"acks":{"queue":"q"}}`:               "acks: expected an array, got object",
		`{"push":[{"messages":[{"data":1}]}]}`: "push[0].queue: required",
		`{"push":[null]}`:                      "push[0].queue: required",
		`{"push":[{"queue":"o"}]}`:             "push[0].messages: at least one message is required",
		`{"push":[{"queue":"o","messages":[{"data":1}]},{"queue":"p","messages":[{"data":1,"data_b64":""}]}]}`: "push[1].messages[0]: both data and data_b64",
		`{"push":[{"queue":"o","messages":[{"data":1}],"x":1}]}`:                                               `push[0]: unknown field "x"`,
		`{"push":[{"queue":"o","messages":[{"partiton":"p","data":1}]}]}`:                                      `push[0].messages[0]: unknown field "partiton"`,
		`{"push":[{"queue":7,"messages":[{"data":1}]}]}`:                                                       "push[0].queue: expected a string, got number",
		`{"push":{"queue":"o"}}`: "push: expected an array, got object",
		"{\"push\":[{\"queue\":\"o\xff\",\"messages\":[{\"data\":1}]}]}": "push[0].queue: invalid UTF-8",
		`{"push":[{"queue":"o","messages":[{"data":1}]}]} x`:             "unexpected data after the object",
		`{"acks":[{"queue":"q","offset":1,"lease":"l"}],}`:               "malformed JSON",
		`{"push":[{"queue":"o","messages":[{"data":1]}]}`:                "malformed JSON",
	}
	for body, want := range bad {
		_, err := DecodeTxn([]byte(body), DefaultLimits())
		requireWireError(t, err, 400, want)
	}

	// Message bytes that are not UTF-8 are kept, as a push keeps them.
	p, err = DecodeTxn([]byte("{\"push\":[{\"queue\":\"o\",\"messages\":[{\"data\":\"\xff\"}]}]}"), DefaultLimits())
	require.NoError(t, err)
	require.Equal(t, []byte("\"\xff\""), p.Push[0].Messages[0].Data)
	require.Equal(t, domain.EncodingBinary, p.Push[0].Messages[0].Encoding)

	// Sizes: the request, a message, the acks, the messages in all.
	lim := Limits{MaxMessageBytes: 4, MaxRequestBytes: 1 << 20}
	_, err = DecodeTxn([]byte(`{"push":[{"queue":"o","messages":[{"data":"12345"}]}]}`), lim)
	requireWireError(t, err, 413, "push[0].messages[0]: message is 7 bytes")
	_, err = DecodeTxn([]byte(`{"push":[{"queue":"o","messages":[{"data":1}]}]}`), Limits{MaxRequestBytes: 10})
	requireWireError(t, err, 413, "over the limit of 10")
	many := `{"acks":[` + strings.TrimSuffix(strings.Repeat(`{"queue":"q","offset":1,"lease":"l"},`, protocol.MaxAcks+1), ",") + `]}`
	_, err = DecodeTxn([]byte(many), Limits{})
	requireWireError(t, err, 413, "acks: 10001 acks")
	half := `{"queue":"o","messages":[` + strings.TrimSuffix(strings.Repeat(`{"data":1},`, protocol.MaxPushMessages/2+1), ",") + `]}`
	_, err = DecodeTxn([]byte(`{"push":[`+half+`,`+half+`]}`), Limits{})
	requireWireError(t, err, 413, "push: 10002 messages")
}

// FuzzDecodeTxn: a body is refused with a 400 or 413, or decodes to checked
// names and bounds that encoding/json reads the same way from the body.
func FuzzDecodeTxn(f *testing.F) {
	for _, s := range wiretest.Bodies[protocol.VerbTxn] {
		f.Add([]byte(s))
	}
	lim := Limits{MaxMessageBytes: 64, MaxRequestBytes: 4096}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeTxn(body, lim)
		if err != nil {
			we, ok := protocol.AsError(err)
			require.True(t, ok, "%v", err)
			require.Contains(t, []int{400, 413}, we.Code)
			require.NotEmpty(t, we.Message)
			return
		}
		require.True(t, len(p.Acks) > 0 || len(p.Push) > 0)
		require.LessOrEqual(t, len(p.Acks), protocol.MaxAcks)
		for _, a := range p.Acks {
			require.NoError(t, protocol.ValidateQueue(a.Queue.Name))
			require.NoError(t, protocol.ValidateName("group", a.Group))
			require.NoError(t, protocol.ValidateName("partition", a.Partition))
			require.NotEmpty(t, a.Lease)
			require.GreaterOrEqual(t, a.Offset, int64(0))
			require.Contains(t, []domain.AckStatus{domain.AckCompleted, domain.AckRetry, domain.AckFailed, domain.AckDead}, a.Status)
		}
		n := 0
		for _, ps := range p.Push {
			require.NoError(t, protocol.ValidateQueue(ps.Queue.Name))
			require.NotEmpty(t, ps.Messages)
			n += len(ps.Messages)
			for _, m := range ps.Messages {
				require.NoError(t, protocol.ValidateName("partition", m.Partition))
				require.LessOrEqual(t, len(m.Data), lim.MaxMessageBytes)
			}
		}
		require.LessOrEqual(t, n, protocol.MaxPushMessages)
		// The shapes of package protocol read the same request, where
		// encoding/json keeps every string as it is.
		if !utf8.Valid(body) || mayHaveSurrogate(body) {
			return
		}
		var req protocol.TxnRequest
		require.NoError(t, json.Unmarshal(body, &req), "%q", body)
		require.Len(t, req.Acks, len(p.Acks))
		for i, a := range req.Acks {
			require.Equal(t, a.Queue, p.Acks[i].Queue.Name)
			require.Equal(t, a.Lease, p.Acks[i].Lease)
		}
		require.Len(t, req.Push, len(p.Push))
		for i, ps := range req.Push {
			require.Equal(t, ps.Queue, p.Push[i].Queue.Name)
			require.Len(t, ps.Messages, len(p.Push[i].Messages))
		}
	})
}

func TestTxnReply(t *testing.T) {
	t.Parallel()
	b := TxnReply(domain.TxnResult{
		Acks: []domain.AckResult{{OK: true, Settled: 3}, {OK: true}},
		Push: [][]domain.PushResult{{{Partition: "eu", Offset: 4, Status: domain.Stored}, {Partition: "eu", Offset: 1, Status: domain.Duplicate}}, {{Partition: "default", Status: domain.Stored}}},
	})
	require.JSONEq(t, `{"acks":[{"ok":true},{"ok":true}],"push":[{"results":[{"partition":"eu","offset":4,"status":"stored"},{"partition":"eu","offset":1,"status":"duplicate"}]},{"results":[{"partition":"default","offset":0,"status":"stored"}]}]}`, string(b))
	var rep protocol.TxnReply
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Push, 2)
	require.JSONEq(t, `{"acks":[],"push":[{"results":[{"partition":"p","offset":0,"status":"stored"}]}]}`,
		string(TxnReply(domain.TxnResult{Push: [][]domain.PushResult{{{Partition: "p", Status: domain.Stored}}}})))
	require.JSONEq(t, `{"acks":[{"ok":true}],"push":[]}`, string(TxnReply(domain.TxnResult{Acks: []domain.AckResult{{OK: true}}})))
}
