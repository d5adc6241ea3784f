package wire

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/store"
)

// The push decoder is a hand-written parser; this is the straightforward
// encoding/json decoder it replaced, kept as the reference it must agree
// with.

// pushJSON is a push request body.
type pushJSON struct {
	Messages []pushMessageJSON `json:"messages"`
}

// pushMessageJSON is one message of a push. Data is json.RawMessage so the
// message's bytes are kept exactly as they appear in the request.
type pushMessageJSON struct {
	Partition string          `json:"partition"`
	ID        string          `json:"id"`
	Data      json.RawMessage `json:"data"`
	DataB64   *string         `json:"data_b64"`
}

// decodePushReflect decodes a push body with encoding/json.
func decodePushReflect(body []byte, lim Limits) ([]store.PushMessage, error) {
	if err := lim.checkRequest(body); err != nil {
		return nil, err
	}
	var req pushJSON
	if err := decodeObject(body, &req); err != nil {
		if we, _ := AsError(err); we != nil && !isSyntax(we) {
			if located := decodeElements(body, "messages", func() any { return new(pushMessageJSON) }); located != nil {
				return nil, located
			}
		}
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	if len(req.Messages) > MaxPushMessages {
		return nil, Errorf(CodeTooLarge, "messages: %d messages, at most %d per push", len(req.Messages), MaxPushMessages)
	}
	out := make([]store.PushMessage, len(req.Messages))
	for i := range req.Messages {
		m := &req.Messages[i]
		pm, err := checkMessage(m.Partition, m.ID, "partition", "id")
		if err != nil {
			return nil, prefixError("messages["+strconv.Itoa(i)+"]", err)
		}
		switch {
		case m.Data != nil && m.DataB64 != nil:
			return nil, badRequest("messages[%d]: both data and data_b64 given; send exactly one", i)
		case m.Data != nil:
			pm.Data = m.Data
		case m.DataB64 != nil:
			data, err := decodeBase64(*m.DataB64)
			if err != nil {
				return nil, badRequest("messages[%d].data_b64: %v", i, err)
			}
			pm.Data = data
		default:
			return nil, badRequest("messages[%d]: one of data or data_b64 is required (an empty message is \"data_b64\":\"\")", i)
		}
		if lim.MaxMessageBytes > 0 && len(pm.Data) > lim.MaxMessageBytes {
			return nil, Errorf(CodeTooLarge, "messages[%d]: message is %d bytes, over the limit of %d", i, len(pm.Data), lim.MaxMessageBytes)
		}
		out[i] = pm
	}
	return out, nil
}

// FuzzPushParserMatchesEncodingJSON checks that the hand-written push
// parser accepts exactly the bodies encoding/json accepts, with the same
// messages.
func FuzzPushParserMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"partition":"eu","id":"order-7","data":{"sku":42}},{"data_b64":"AAEC"}]}`,
		`{"messages":[{"data": [1, {"x" : "y"}, -0.5e+3, true, false, null, "\u00e9\ud83d\ude00"] }]}`,
		`{"messages":null}`, `{"messages":[null]}`, `{"Messages":[{"DATA":1,"Partition":"p"}]}`,
		`{"messages":[{"data":1,"data":2}],"messages":[{"data":3}]}`, `{"messages":[{"partition":"a","partition":null,"data":1}]}`,
		`{"messages":[{"data_b64":"AA==","data_b64":null,"data":1}]}`, `{"messages":[{"partition":"\ud800x","data":1}]}`,
		`{"messages":[{"partition":"\ud800\udc00","data":1}]}`, `{"messages":[{"partition":"\ud800\u0041","data":1}]}`,
		"{\"messages\":[{\"partition\":\"\xff\xfe\",\"data\":1}]}", `{"messages":[{"data":01}]}`, `{"messages":[{"data":1.}]}`,
		`{"messages":[{"data":"\x"}]}`, `{"messages":[{"data":"\u12G4"}]}`, `{"messages":[{"data":tru}]}`, `{"messages":{}}`,
		`{"messages":[1]}`, `{"messages":[{"partition":1,"data":1}]}`, `{"messages":[{"data_b64":[]}]}`, ` {"messages":[{"data":1}]} `,
		`{"messages":[{"data":1}]}x`, `{"messages":[{"data":1},]}`, `{"messages":[{"data":1}`, `{"messages":[{"\u0064ata":1}]}`,
		`{"messages":[{"\u017fata":1}]}`, `{"meſſages":[{"data":1}]}`, `{"messages":[{"data":"` + strings.Repeat("[", 3) + `"}]}`,
		`{"messages":[{"data":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}]}`, `{"messages":[{"data":{"a":1,"a":2}}]}`,
		`{"messages":[{"data":1e5,"id":"i"},{"data":-0}]}`, "{\"messages\":[{\"data\":\"\t\"}]}", `{}`, ``, `[]`, `nul`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := DecodePush(body, Limits{})
		want, wantErr := decodePushReflect(body, Limits{})
		if wantErr != nil || gotErr != nil {
			require.Equal(t, wantErr == nil, gotErr == nil, "accept/reject differ on %q: parser %v, encoding/json %v", body, gotErr, wantErr)
			we, ok := AsError(gotErr)
			require.True(t, ok)
			require.Contains(t, []int{400, 413}, we.Code)
			return
		}
		require.Equal(t, len(want), len(got))
		for i := range want {
			require.Equal(t, want[i].Partition, got[i].Partition, "message %d of %q", i, body)
			require.Equal(t, want[i].ID, got[i].ID)
			require.Equal(t, string(want[i].Data), string(got[i].Data))
		}
	})
}

// TestPushParserErrors checks the parser's messages name the place.
func TestPushParserErrors(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"messages":[{"data":1},{"data":2,"parition":"x"}]}`: `messages[1]: unknown field "parition"`,
		`{"messages":[{"data":1},{"data_b64":5}]}`:            "messages[1].data_b64: expected a string, got number",
		`{"messages":[{"data":1},"x"]}`:                       "messages[1]: expected an object, got string",
		`{"messages":[{"data":1,}]}`:                          "malformed JSON at byte 24: invalid character '}' looking for beginning of object key string",
		`{"messages":[{"data":01}]}`:                          "malformed JSON at byte 23: invalid character '1' after object key:value pair",
		`{"messages":[{"data":"a` + "\x01" + `"}]}`:           `malformed JSON at byte 24: invalid character '\x01' in string literal`,
		`{"messages":[{"data":` + strings.Repeat("[", 10001):  "exceeded max depth",
		`{"messages":[{"data":[1,2}]}`:                        "invalid character '}' after array element",
	} {
		_, err := DecodePush([]byte(body), Limits{})
		requireWireError(t, err, 400, want)
	}
}
