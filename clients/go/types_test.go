package comb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/protocol"
)

func TestEncodeDataChoosesField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		asJSON  bool
		comment string
	}{
		{`{"sku":42}`, true, "compact object"},
		{`42`, true, "number"},
		{`"text"`, true, "string"},
		{`null`, true, "null"},
		{`[1,"<&>"]`, true, "HTML characters stay as they are"},
		{`{"sku": 42}`, false, "whitespace would be compacted away"},
		{` 42`, false, "leading space would be lost"},
		{`plain text`, false, "not JSON"},
		{"", false, "empty message has no JSON form"},
		{"\"\xff\"", false, "invalid UTF-8 inside a JSON string"},
		{"\x00\x01\x02", false, "binary"},
	} {
		raw, b64 := encodeData([]byte(tc.in))
		if tc.asJSON {
			require.Equal(t, tc.in, string(raw), tc.comment)
			require.Nil(t, b64, tc.comment)
		} else {
			require.Nil(t, raw, tc.comment)
			require.NotNil(t, b64, tc.comment)
		}
	}
}

// TestPushBodyKeepsBytes checks the request body itself: the data bytes
// appear verbatim in it and decode back to the same bytes.
func TestPushBodyKeepsBytes(t *testing.T) {
	t.Parallel()
	msgs := [][]byte{[]byte(`{"a":"<b>&\u2028"}`), []byte("\x00binary"), []byte(`{"sku": 42}`), {}}
	req := protocol.PushRequest{}
	for _, m := range msgs {
		req.Messages = append(req.Messages, pushMessage(Message{Partition: "p", Data: m}))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(req))
	require.Contains(t, buf.String(), `"data":{"a":"<b>&\u2028"}`)
	require.Contains(t, buf.String(), `"data_b64":""`, "an empty message still carries a data field")

	var back protocol.PopReply
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Len(t, back.Messages, len(msgs))
	for i, m := range back.Messages {
		got, err := decodeData(m.Data, m.DataB64)
		require.NoError(t, err)
		require.Equal(t, msgs[i], got)
	}
}

func TestDecodeDataNullIsBytes(t *testing.T) {
	t.Parallel()
	var d protocol.Delivery
	require.NoError(t, json.Unmarshal([]byte(`{"data":null}`), &d))
	got, err := decodeData(d.Data, d.DataB64)
	require.NoError(t, err)
	require.Equal(t, "null", string(got))

	_, err = decodeData(nil, new("!!"))
	require.Error(t, err)
}

func FuzzEncodeDataRoundTrip(f *testing.F) {
	f.Add([]byte(`{"sku":42}`))
	f.Add([]byte(`{"sku": 42}`))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(`"\u00e9"`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		// The one-pass check against what it replaced: encoding/json's
		// validity and compaction.
		var c bytes.Buffer
		ref := len(in) > 0 && utf8.Valid(in) && json.Valid(in) && json.Compact(&c, in) == nil && bytes.Equal(c.Bytes(), in)
		require.Equal(t, ref, isCompactJSON(in), "%q", in)
		w := pushMessage(Message{Data: in})
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(w))
		var back protocol.Delivery
		require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
		got, err := decodeData(back.Data, back.DataB64)
		require.NoError(t, err)
		require.True(t, bytes.Equal(in, got), "in %q got %q", in, got)
	})
}

func TestErrorMatchesSentinel(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]error{
		400: ErrBadRequest, 404: ErrNotFound, 409: ErrConflict, 413: ErrTooLarge,
		429: ErrLimit, 500: ErrInternal, 503: ErrUnavailable,
	} {
		err := fmt.Errorf("comb: pop q: %w", &Error{Code: code, Message: "m"})
		require.ErrorIs(t, err, want)
		var e *Error
		require.True(t, errors.As(err, &e))
		require.Equal(t, code, e.Code)
		if code != 404 {
			require.NotErrorIs(t, err, ErrNotFound)
		}
	}
	require.NotErrorIs(t, &Error{Code: 418}, ErrBadRequest)
	require.Equal(t, "queue q not found (404)", (&Error{Code: 404, Message: "queue q not found"}).Error())
}

func TestDurationMS(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(0), durationMS(0))
	require.Equal(t, int64(0), durationMS(-time.Second))
	require.Equal(t, int64(1), durationMS(time.Microsecond))
	require.Equal(t, int64(1500), durationMS(1500*time.Millisecond))
}

func TestCheckQueue(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "a b", "a.*", "a.>", ".a", "a.", "a..b"} {
		require.ErrorIs(t, checkQueue(bad), ErrBadRequest, bad)
	}
	require.NoError(t, checkQueue("billing.invoices"))
}
