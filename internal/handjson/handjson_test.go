package handjson

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAppendString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `q"b\s/`, "\x00\x01\x1f\x7f", "\n\r\t\b\f", "caf\u00e9 日本 👍",
		"\u2028\u2029", "bad\xff\xfeutf8", "<html>&amp;", "\xed\xa0\x80"} {
		got := AppendString(nil, s)
		require.True(t, json.Valid(got), "%q -> %s", s, got)
		var back, want string
		require.NoError(t, json.Unmarshal(got, &back))
		std, _ := json.Marshal(s)
		require.NoError(t, json.Unmarshal(std, &want))
		require.Equal(t, want, back, "%q", s)
	}
	require.Equal(t, `"a\"b\\c\n\u0001\u2028"`, string(AppendString(nil, "a\"b\\c\n\x01\u2028")))
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\", "\x00\x1f", "\xff", "\u2028", "日本", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString(nil, s)
		require.True(t, json.Valid(got), "%q -> %q", s, got)
		var back, want string
		require.NoError(t, json.Unmarshal(got, &back))
		std, err := json.Marshal(s)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(std, &want))
		require.Equal(t, want, back)
	})
}

// FuzzReaderMatchesEncodingJSON holds the reader to encoding/json: Valid
// agrees with json.Valid (less the space json.Valid allows around a
// value), and Str decodes a string as json.Unmarshal does.
func FuzzReaderMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,-0.5e+3,true,false,null,"x\u00e9\ud800"]}`, `"\ud83d\ude00"`, "\"\xff\"",
		`[1,]`, `01`, `{"a" 1}`, `"\x"`, `1e`, `-`, `tru`, "\"a\x01\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		trimmed := len(b) > 0 && (b[0] == ' ' || b[len(b)-1] == ' ' || b[0] == '\n' || b[len(b)-1] == '\n' ||
			b[0] == '\t' || b[len(b)-1] == '\t' || b[0] == '\r' || b[len(b)-1] == '\r')
		if !trimmed {
			require.Equal(t, json.Valid(b), Valid(b), "%q", b)
		}
		if len(b) > 0 && b[0] == '"' {
			r := Reader{B: b}
			got, err := r.Str()
			var want string
			if json.Unmarshal(b, &want) == nil && r.End() == nil {
				require.NoError(t, err, "%q", b)
				require.Equal(t, want, got, "%q", b)
			}
		}
	})
}

// FuzzSpecial8 holds the eight-byte test to the byte table.
func FuzzSpecial8(f *testing.F) {
	f.Add(uint64(0x4141414141414141))
	f.Add(uint64(0x2241414141414141))
	f.Add(uint64(0x80ff5c1f20217e7f))
	f.Fuzz(func(t *testing.T, x uint64) {
		want := false
		for k := 0; k < 8; k++ {
			want = want || stringSpecial[byte(x>>(8*k))]
		}
		require.Equal(t, want, special8(x), "%#016x", x)
	})
}

// Every byte at every place, among plain ones and among bytes of every
// value (borrows between lanes are where such tests go wrong).
func TestSpecial8EveryByte(t *testing.T) {
	for _, fill := range []byte{'A', 0x20, 0x21, 0x7f, 0x80, 0xff, '"' + 1, '\\' + 1, '"' - 1, '\\' - 1} {
		for k := 0; k < 8; k++ {
			for c := 0; c < 256; c++ {
				var x uint64
				for i := 0; i < 8; i++ {
					b := fill
					if i == k {
						b = byte(c)
					}
					x |= uint64(b) << (8 * i)
				}
				want := stringSpecial[byte(c)] || stringSpecial[fill]
				require.Equal(t, want, special8(x), "byte %#x at %d among %#x", c, k, fill)
			}
		}
	}
}
