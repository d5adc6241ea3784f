package wire

import (
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/protocol"
)

// Names are compared as bytes. encoding/json (and so a lenient parser)
// turns invalid UTF-8 and lone surrogate escapes into U+FFFD, which would
// store different byte strings under one name; every decoder refuses them
// instead, naming the field.

// bodiesWithName returns, for each decoder, a body that carries lit (the
// inside of a JSON string literal) as a partition, group or id, and a
// function that returns the name the decoder stored.
func bodiesWithName(lit string) map[string]func() (string, error) {
	return map[string]func() (string, error){
		"push partition": func() (string, error) {
			ms, err := DecodePush([]byte(`{"messages":[{"partition":"`+lit+`","data":1}]}`), Limits{})
			if err != nil {
				return "", err
			}
			return ms[0].Partition, nil
		},
		"push id": func() (string, error) {
			ms, err := DecodePush([]byte(`{"messages":[{"id":"`+lit+`","data":1}]}`), Limits{})
			if err != nil {
				return "", err
			}
			return ms[0].ID, nil
		},
		"pop group": func() (string, error) {
			p, err := DecodePop([]byte(`{"group":"` + lit + `"}`))
			return p.Params.Group, err
		},
		"pop partition": func() (string, error) {
			p, err := DecodePop([]byte(`{"partition":"` + lit + `"}`))
			return p.Params.Partition, err
		},
		"ack group": func() (string, error) {
			g, _, err := DecodeAck([]byte(`{"group":"` + lit + `","acks":[{"offset":1,"lease":"l"}]}`))
			return g, err
		},
		"ack partition": func() (string, error) {
			_, acks, err := DecodeAck([]byte(`{"acks":[{"offset":1,"lease":"l"},{"partition":"` + lit + `","offset":1,"lease":"l"}]}`))
			if err != nil {
				return "", err
			}
			return acks[1].Partition, nil
		},
		"seek group": func() (string, error) {
			s, err := DecodeSeek([]byte(`{"group":"` + lit + `","to":"end"}`))
			return s.Group, err
		},
		"seek partition": func() (string, error) {
			s, err := DecodeSeek([]byte(`{"partition":"` + lit + `","to":"end"}`))
			return s.Partition, err
		},
		"dlq group": func() (string, error) {
			d, err := DecodeDLQ([]byte(`{"group":"` + lit + `"}`))
			return d.Params.Group, err
		},
	}
}

func TestNamesAreBytesOrRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		lit   string // inside the JSON string
		field string // in the error
		want  string // the message's part
	}{
		{"eu\xff", "", "invalid UTF-8 at byte"},
		{"\xc3", "", "invalid UTF-8 at byte"},
		{`a\ud800`, "", `lone surrogate \ud800`},
		{`\udc00b`, "", `lone surrogate \udc00`},
		{`\ud800\u0041`, "", `lone surrogate \ud800`},
	} {
		for name, decode := range bodiesWithName(c.lit) {
			got, err := decode()
			require.Error(t, err, "%s %q stored as %q", name, c.lit, got)
			we, ok := protocol.AsError(err)
			require.True(t, ok)
			require.Equal(t, 400, we.Code, "%s: %v", name, err)
			require.Contains(t, we.Message, c.want, name)
			field := name[strings.LastIndexByte(name, ' ')+1:]
			require.Contains(t, we.Message, field, "%s: the error names the field", name)
		}
	}
	// What is valid is kept byte for byte, U+FFFD included when it was sent.
	for lit, want := range map[string]string{
		"eu":               "eu",
		`\ufffd`:           "\ufffd",
		"\xef\xbf\xbd":     "\ufffd",
		`\ud83d\ude00`:     "😀",
		"日本":               "日本",
		`a\"b\\c`:          `a"b\c`,
		`caf\u00e9-` + "é": "café-é",
	} {
		for name, decode := range bodiesWithName(lit) {
			got, err := decode()
			require.NoError(t, err, "%s %q", name, lit)
			require.Equal(t, want, got, name)
		}
	}
}

// FuzzNameBytes writes arbitrary bytes as a name, raw inside the string
// literal (only quote, backslash and control characters escaped), into
// every decoder: each either stores exactly those bytes or refuses them
// with a 400, and it refuses them exactly when they are not a valid name.
func FuzzNameBytes(f *testing.F) {
	for _, s := range []string{"eu", "\xff", "a\xc3", "\xed\xa0\x80", "日本", "\ufffd", "a\"b", "\x7f", "é\u2028", strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lit := escapeRaw(s)
		valid := protocol.ValidateName("name", s) == nil
		for name, decode := range bodiesWithName(lit) {
			got, err := decode()
			if err != nil {
				we, ok := protocol.AsError(err)
				require.True(t, ok, "%s: %v", name, err)
				require.Equal(t, 400, we.Code, "%s: %v", name, err)
				// An id may be empty; everything else refused must be
				// an invalid name.
				require.False(t, valid, "%s refused the valid name %q: %v", name, s, err)
				continue
			}
			require.True(t, valid || (s == "" && (strings.HasSuffix(name, " id") || strings.HasSuffix(name, "group") || strings.HasSuffix(name, "partition"))),
				"%s accepted the invalid name %q as %q", name, s, got)
			if s != "" {
				require.Equal(t, s, got, "%s stores the name byte for byte", name)
			}
		}
	})
}

// FuzzNameEscapes writes a name as \u escapes of UTF-16 code units: the
// decoders store the decoded text exactly, or refuse a lone surrogate.
func FuzzNameEscapes(f *testing.F) {
	f.Add([]byte{0x00, 0x65, 0x00, 0x75})
	f.Add([]byte{0xd8, 0x00})
	f.Add([]byte{0xd8, 0x3d, 0xde, 0x00})
	f.Add([]byte{0xdc, 0x00, 0x00, 0x41})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		units := make([]uint16, len(b)/2)
		var lit strings.Builder
		for i := range units {
			units[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
			lit.WriteString(`\u`)
			const hex = "0123456789abcdef"
			for shift := 12; shift >= 0; shift -= 4 {
				lit.WriteByte(hex[units[i]>>shift&0xf])
			}
		}
		want, lone := decodeUTF16(units)
		valid := !lone && protocol.ValidateName("name", want) == nil
		for name, decode := range bodiesWithName(lit.String()) {
			got, err := decode()
			if !valid {
				require.Error(t, err, "%s accepted %s as %q", name, lit.String(), got)
				continue
			}
			require.NoError(t, err, "%s refused %s", name, lit.String())
			require.Equal(t, want, got, name)
		}
	})
}

// decodeUTF16 decodes units and says whether a surrogate was unpaired.
func decodeUTF16(units []uint16) (string, bool) {
	lone := false
	for i := 0; i < len(units); i++ {
		if !utf16.IsSurrogate(rune(units[i])) {
			continue
		}
		if i+1 < len(units) && utf16.DecodeRune(rune(units[i]), rune(units[i+1])) != utf8.RuneError {
			i++
			continue
		}
		lone = true
	}
	return string(utf16.Decode(units)), lone
}

// escapeRaw writes s into a JSON string literal, escaping only what JSON
// requires and leaving every other byte (invalid UTF-8 included) as it is.
func escapeRaw(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
