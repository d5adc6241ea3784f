package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSubject(t *testing.T) {
	t.Parallel()
	ok := []struct{ subject, verb, queue string }{
		{"comb.push.orders", VerbPush, "orders"},
		{"comb.put.billing.invoices", VerbPut, "billing.invoices"},
		{"comb.pop.a-b_c.D9", VerbPop, "a-b_c.D9"},
		{"comb.list", VerbList, ""},
		{"comb.dlq.x", VerbDLQ, "x"},
		{"comb.seek.a.b", VerbSeek, "a.b"},
	}
	for _, c := range ok {
		verb, queue, err := ParseSubject("comb", c.subject)
		require.NoError(t, err, c.subject)
		require.Equal(t, c.verb, verb)
		require.Equal(t, c.queue, queue)
	}
	verb, queue, err := ParseSubject("my.comb", "my.comb.ack.q")
	require.NoError(t, err)
	require.Equal(t, VerbAck, verb)
	require.Equal(t, "q", queue)

	bad := map[string]string{
		"comb.push":           "queue name missing",
		"comb.push.":          "queue name missing",
		"comb.list.x":         "list takes no queue",
		"comb.frob.x":         `unknown verb "frob"`,
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
		_, _, err := ParseSubject("comb", subject)
		require.Error(t, err, subject)
		we, ok := AsError(err)
		require.True(t, ok)
		require.Equal(t, 400, we.Code)
		require.Contains(t, we.Message, want, subject)
	}
}

func TestValidateQueue(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidateQueue(strings.Repeat("a", 255)))
	require.ErrorContains(t, ValidateQueue(strings.Repeat("a", 256)), "256 bytes")
	require.NoError(t, ValidateQueue(strings.TrimSuffix(strings.Repeat("a.", 16), ".")))
	require.ErrorContains(t, ValidateQueue(strings.TrimSuffix(strings.Repeat("a.", 17), ".")), "17 tokens")
	require.ErrorContains(t, ValidateQueue(""), "empty")
	require.ErrorContains(t, ValidateQueue(".a"), "empty token")
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"eu", "with space", "caf\u00e9", "日本", "emoji 👨‍👩‍👧", strings.Repeat("x", 255), "a.b*>"} {
		require.NoError(t, ValidateName("partition", s), s)
	}
	bad := map[string]string{
		"":                       "empty",
		strings.Repeat("x", 256): "256 bytes",
		"a\nb":                   "control character",
		"a\x00":                  "control character",
		"a\x7f":                  "control character",
		"a\u0085":                "control character",
		"a\u2028":                "control character",
		"a\xffb":                 "invalid UTF-8",
	}
	for s, want := range bad {
		err := ValidateName("group", s)
		require.ErrorContains(t, err, want, "%q", s)
		require.ErrorContains(t, err, "group")
	}
}
