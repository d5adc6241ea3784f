package wire

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// The push decoder is a hand-written parser; this is the straightforward
// encoding/json decoder it replaced, kept as the reference it must agree
// with.

// decodePushReflect decodes a push body with encoding/json.
// It decodes into protocol.PushRequest, the shape clients encode, and leaves
// out decodeObject's string check: message data may hold invalid UTF-8
// inside its strings, which the hand-written parser allows there and
// refuses only in names.
func decodePushReflect(body []byte, lim Limits) ([]domain.PushMessage, error) {
	if err := lim.checkRequest(body); err != nil {
		return nil, err
	}
	var req protocol.PushRequest
	if i := skipSpace(body, 0); i < len(body) && body[i] != '{' {
		return nil, badRequest("request body must be a JSON object")
	}
	if err := decodeJSONOrEmpty(body, &req); err != nil {
		if we, _ := protocol.AsError(err); we != nil && !isSyntax(we) {
			if located := decodeElements(body, "messages", func() any { return new(protocol.PushMessage) }); located != nil {
				return nil, located
			}
		}
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	if len(req.Messages) > protocol.MaxPushMessages {
		return nil, protocol.Errorf(protocol.CodeTooLarge, "messages: %d messages, at most %d per push", len(req.Messages), protocol.MaxPushMessages)
	}
	out := make([]domain.PushMessage, len(req.Messages))
	now := time.Now()
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
			pm.Data, pm.Encoding = m.Data, EncodingOf(m.Data)
		case m.DataB64 != nil:
			data, err := decodeBase64(*m.DataB64)
			if err != nil {
				return nil, badRequest("messages[%d].data_b64: %v", i, err)
			}
			pm.Data, pm.Encoding = data, EncodingOf(data)
		default:
			return nil, badRequest("messages[%d]: one of data or data_b64 is required (an empty message is \"data_b64\":\"\")", i)
		}
		if err := checkExtras(&pm, m.Headers, m.DelayMS, m.NotBefore, now, pushHoldFields); err != nil {
			return nil, prefixError("messages["+strconv.Itoa(i)+"]", err)
		}
		if lim.MaxMessageBytes > 0 && pm.Size() > lim.MaxMessageBytes {
			return nil, protocol.Errorf(protocol.CodeTooLarge, "messages[%d]: message is %d bytes, over the limit of %d", i, pm.Size(), lim.MaxMessageBytes)
		}
		out[i] = pm
	}
	return out, nil
}

func decodeJSONOrEmpty(body []byte, v any) error {
	if skipSpace(body, 0) == len(body) {
		return nil
	}
	return decodeJSON(body, v)
}

// isNameMangled reports whether an error of the parser says a partition or
// id was not its bytes (invalid UTF-8, a lone surrogate).
func isNameMangled(err error) bool {
	we, ok := protocol.AsError(err)
	return ok && (strings.Contains(we.Message, "invalid UTF-8 at byte") || strings.Contains(we.Message, "lone surrogate"))
}

// FuzzPushParserMatchesEncodingJSON checks that the hand-written push
// parser accepts exactly the bodies encoding/json accepts, with the same
// messages, except one whose partition or id encoding/json would decode to
// U+FFFD in place of bytes that are not UTF-8: the parser refuses those.
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
		`{"messages":[{"data":1,"headers":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","X":["a","b"]}}]}`,
		`{"messages":[{"data":1,"headers":{"a":"1"},"Headers":{"b":["2"]}}]}`, `{"messages":[{"data":1,"headers":{"a":"1"},"headers":null}]}`,
		`{"messages":[{"data":1,"headers":{"a":null}}]}`, `{"messages":[{"data":1,"headers":{"a":[]}}]}`, `{"messages":[{"data":1,"headers":{"Comb-X":"1"}}]}`,
		`{"messages":[{"data":1,"headers":{"a b":"1"}}]}`, `{"messages":[{"data":1,"headers":{"a":"\r"}}]}`, `{"messages":[{"data":1,"headers":{"a":"\ud800"}}]}`,
		`{"messages":[{"data":1,"headers":[]}]}`, `{"messages":[{"data":1,"headers":{"a":1}}]}`, `{"messages":[{"data":1,"delay_ms":5000}]}`,
		`{"messages":[{"data":1,"delay_ms":1.5}]}`, `{"messages":[{"data":1,"delay_ms":-1}]}`, `{"messages":[{"data":1,"delay_ms":"5"}]}`,
		`{"messages":[{"data":1,"not_before":"2026-12-01T10:00:00Z"}]}`, `{"messages":[{"data":1,"not_before":"tomorrow"}]}`,
		`{"messages":[{"data":1,"not_before":"2026-12-01T10:00:00Z","delay_ms":1}]}`, `{"messages":[{"data":1,"delay_ms":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := DecodePush(body, Limits{})
		want, wantErr := decodePushReflect(body, Limits{})
		if wantErr == nil && isNameMangled(gotErr) {
			mangled := false
			for _, m := range want {
				mangled = mangled || strings.ContainsRune(m.Partition+m.ID+string(m.Headers), utf8.RuneError)
			}
			require.True(t, mangled, "refused %q (%v), but encoding/json decodes no name to U+FFFD", body, gotErr)
			return
		}
		if wantErr != nil || gotErr != nil {
			require.Equal(t, wantErr == nil, gotErr == nil, "accept/reject differ on %q: parser %v, encoding/json %v", body, gotErr, wantErr)
			we, ok := protocol.AsError(gotErr)
			require.True(t, ok)
			require.Contains(t, []int{400, 413}, we.Code)
			return
		}
		require.Equal(t, len(want), len(got))
		for i := range want {
			require.Equal(t, want[i].Partition, got[i].Partition, "message %d of %q", i, body)
			require.Equal(t, want[i].ID, got[i].ID)
			require.Equal(t, string(want[i].Data), string(got[i].Data))
			require.Equal(t, want[i].Encoding, got[i].Encoding)
			require.Equal(t, string(want[i].Headers), string(got[i].Headers))
			require.Equal(t, want[i].DelayMS, got[i].DelayMS)
			require.True(t, want[i].NotBefore.Equal(got[i].NotBefore))
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
