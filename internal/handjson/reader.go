// Package handjson is the JSON that Comb's hot paths read and write by
// hand: a strict reader (Reader) for decoders written on it, which
// accepts exactly the syntax encoding/json accepts, with its nesting
// limit, and decodes strings as encoding/json does (invalid UTF-8 and lone
// surrogates become U+FFFD), so that a decoder built on it can be held to
// encoding/json by differential fuzzing. Its errors read like
// encoding/json's ("malformed JSON at byte 12: invalid character 'x' …").
//
// It exists because encoding/json spends most of a small body's time on
// reflection and a second pass over the bytes: the broker's push parser
// (internal/wire) and the clients' reply decoders (clients/go, the
// loader) read the protocol's hot bodies with it, and
// write strings with AppendString.
package handjson

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is encoding/json's nesting limit, kept for the same answers.
const MaxDepth = 10000

// ErrNotJSON is every error of a Quiet reader.
var ErrNotJSON = errors.New("not JSON")

// Reader reads the JSON in B from byte I on. Its methods move I past what
// they read; on an error I is where the input went wrong.
type Reader struct {
	B []byte
	I int
	// Quiet makes every error ErrNotJSON, for checks that only want a yes
	// or no and must not pay for messages.
	Quiet bool
	// Errorf builds the errors; nil is fmt.Errorf. The broker makes them
	// its 400s.
	Errorf func(format string, args ...any) error
	// Bad records the first thing the last Str call replaced with U+FFFD
	// (invalid UTF-8, a lone surrogate escape), as encoding/json would: a
	// name must be refused rather than stored under the replacement.
	Bad *StrProblem
}

// StrProblem is where a string stopped being the bytes it decodes to.
type StrProblem struct {
	At   int    // byte offset in B
	What string // "invalid UTF-8" or `a lone surrogate \ud800`
}

// Valid reports whether b is exactly one JSON value, as json.Valid does but
// without the surrounding space json.Valid allows.
func Valid(b []byte) bool {
	p := Reader{B: b, Quiet: true}
	return p.Value(1) == nil && p.I == len(b)
}

// End checks that nothing but space follows I.
func (p *Reader) End() error {
	p.WS()
	if p.I < len(p.B) {
		return p.Syntax("after top-level value")
	}
	return nil
}

func (p *Reader) errorf(format string, args ...any) error {
	if p.Errorf != nil {
		return p.Errorf(format, args...)
	}
	return fmt.Errorf(format, args...)
}

// Object parses an object at p.I ('{' checked by the caller), calling
// field with each key while p.I is at its value, which field must consume.
func (p *Reader) Object(field func(key []byte) error) error {
	p.I++
	p.WS()
	if p.I < len(p.B) && p.B[p.I] == '}' {
		p.I++
		return nil
	}
	for {
		p.WS()
		if p.I >= len(p.B) {
			return p.EOF()
		}
		if p.B[p.I] != '"' {
			return p.Syntax("looking for beginning of object key string")
		}
		key, err := p.Key()
		if err != nil {
			return err
		}
		p.WS()
		if p.I >= len(p.B) {
			return p.EOF()
		}
		if p.B[p.I] != ':' {
			return p.Syntax("after object key")
		}
		p.I++
		if err := field(key); err != nil {
			return err
		}
		if done, err := p.Sep('}', "after object key:value pair"); err != nil || done {
			return err
		}
	}
}

// Key returns an object key, unescaped only when it has escapes.
func (p *Reader) Key() ([]byte, error) {
	start := p.I + 1
	for j := start; j < len(p.B); j++ {
		c := p.B[j]
		if c == '"' {
			p.I = j + 1
			return p.B[start:j], nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
	}
	s, err := p.Str()
	return []byte(s), err
}

// Str parses a JSON string at p.I and returns its value, as encoding/json
// would: invalid UTF-8 and lone surrogates become U+FFFD, and p.Bad says
// where the first was.
func (p *Reader) Str() (string, error) {
	p.Bad = nil
	p.I++ // opening quote
	start := p.I
	// Fast path: no escapes, ASCII or valid UTF-8.
	ascii := true
	for j := start; j < len(p.B); j++ {
		c := p.B[j]
		switch {
		case c == '"':
			if ascii || utf8.Valid(p.B[start:j]) {
				p.I = j + 1
				return string(p.B[start:j]), nil
			}
			return p.strSlow(start)
		case c == '\\':
			return p.strSlow(start)
		case c < 0x20:
			p.I = j
			return "", p.Syntax("in string literal")
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	p.I = len(p.B)
	return "", p.EOF()
}

func (p *Reader) strSlow(start int) (string, error) {
	out := make([]byte, 0, 32)
	j := start
	for j < len(p.B) {
		c := p.B[j]
		switch {
		case c == '"':
			p.I = j + 1
			return string(out), nil
		case c < 0x20:
			p.I = j
			return "", p.Syntax("in string literal")
		case c == '\\':
			if j+1 >= len(p.B) {
				p.I = len(p.B)
				return "", p.EOF()
			}
			switch e := p.B[j+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
				j += 2
			case 'b':
				out = append(out, '\b')
				j += 2
			case 'f':
				out = append(out, '\f')
				j += 2
			case 'n':
				out = append(out, '\n')
				j += 2
			case 'r':
				out = append(out, '\r')
				j += 2
			case 't':
				out = append(out, '\t')
				j += 2
			case 'u':
				r, ok := Hex4(p.B, j+2)
				if !ok {
					p.I = j + 2
					return "", p.badEscape()
				}
				j += 6
				if utf16.IsSurrogate(r) {
					r2, ok2 := rune(-1), false
					if j+1 < len(p.B) && p.B[j] == '\\' && p.B[j+1] == 'u' {
						r2, ok2 = Hex4(p.B, j+2)
					}
					if dec := utf16.DecodeRune(r, r2); ok2 && dec != utf8.RuneError {
						r = dec
						j += 6
					} else {
						p.Note(j-6, fmt.Sprintf("a lone surrogate \\u%04x", r))
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				p.I = j + 1
				return "", p.Syntax("in string escape code")
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			j++
		default:
			r, size := utf8.DecodeRune(p.B[j:])
			if r == utf8.RuneError && size == 1 {
				p.Note(j, "invalid UTF-8")
			}
			out = utf8.AppendRune(out, r) // RuneError for invalid bytes, as encoding/json
			j += size
		}
	}
	p.I = len(p.B)
	return "", p.EOF()
}

// Note records the first problem of the string being parsed.
func (p *Reader) Note(at int, what string) {
	if p.Bad == nil {
		p.Bad = &StrProblem{At: at, What: what}
	}
}

// Hex4 reads the four hex digits of a \\u escape at b[i:].
func Hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// Value checks the JSON value at p.I and moves past it.
func (p *Reader) Value(depth int) error {
	if depth > MaxDepth {
		if p.Quiet {
			return ErrNotJSON
		}
		return p.errorf("malformed JSON at byte %d: exceeded max depth", p.I)
	}
	if p.I >= len(p.B) {
		return p.EOF()
	}
	switch c := p.B[p.I]; {
	case c == '{':
		return p.Object(func([]byte) error {
			p.WS()
			return p.Value(depth + 1)
		})
	case c == '[':
		p.I++
		p.WS()
		if p.I < len(p.B) && p.B[p.I] == ']' {
			p.I++
			return nil
		}
		for {
			p.WS()
			if err := p.Value(depth + 1); err != nil {
				return err
			}
			if done, err := p.Sep(']', "after array element"); err != nil || done {
				return err
			}
		}
	case c == '"':
		return p.SkipString()
	case c == '-' || ('0' <= c && c <= '9'):
		return p.Number()
	case c == 't':
		return p.Lit("true")
	case c == 'f':
		return p.Lit("false")
	case c == 'n':
		return p.Lit("null")
	}
	return p.Syntax("looking for beginning of value")
}

// SkipString moves past a string, checking it as encoding/json's scanner
// does (any byte but control characters, valid escapes).
func (p *Reader) SkipString() error {
	j := p.I + 1
	for j < len(p.B) {
		// Most bytes of a string need no look: skip them in a tight loop
		// (message data is mostly such bytes, and this is the push path's
		// hottest loop).
		// Eight bytes at a time while none is special, then byte by byte
		// to the one that is.
		for j+8 <= len(p.B) && !special8(binary.LittleEndian.Uint64(p.B[j:])) {
			j += 8
		}
		for j < len(p.B) && !stringSpecial[p.B[j]] {
			j++
		}
		if j >= len(p.B) {
			break
		}
		c := p.B[j]
		switch {
		case c == '"':
			p.I = j + 1
			return nil
		case c < 0x20:
			p.I = j
			return p.Syntax("in string literal")
		case c == '\\':
			if j+1 >= len(p.B) {
				p.I = len(p.B)
				return p.EOF()
			}
			switch p.B[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if _, ok := Hex4(p.B, j+2); !ok {
					p.I = j + 2
					return p.badEscape()
				}
				j += 6
			default:
				p.I = j + 1
				return p.Syntax("in string escape code")
			}
		default:
			j++
		}
	}
	p.I = len(p.B)
	return p.EOF()
}

// Sep reads what follows an element of an object or array: a comma (more
// elements follow) or closer (done). where names the place for a syntax
// error, as encoding/json does.
func (p *Reader) Sep(closer byte, where string) (done bool, err error) {
	p.WS()
	if p.I >= len(p.B) {
		return false, p.EOF()
	}
	switch p.B[p.I] {
	case ',':
		p.I++
		return false, nil
	case closer:
		p.I++
		return true, nil
	}
	return false, p.Syntax(where)
}

// special8 reports whether any of the eight bytes in x is special
// (stringSpecial): a control character, a quote or a backslash. These are
// the usual tests for a zero byte ((v - 0x01…) & ^v & 0x80…) and for a
// byte below n ((v - n…) & ^v & 0x80…), which are never true when no byte
// is one, and so need no more care: a false positive beyond a true one
// only stops the fast loop where the byte loop takes over anyway.
func special8(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	bs := x ^ (lo * '\\')
	return ((x-lo*0x20)&^x|(q-lo)&^q|(bs-lo)&^bs)&hi != 0
}

// stringSpecial marks the bytes that end or interrupt a plain run inside a
// JSON string: the quote, the backslash and control characters.
var stringSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// badEscape reports a malformed \u escape at the first bad hex digit, or
// the end of input.
func (p *Reader) badEscape() error {
	for k := 0; k < 4; k++ {
		if p.I >= len(p.B) {
			return p.EOF()
		}
		c := p.B[p.I]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return p.Syntax("in \\u hexadecimal character escape")
		}
		p.I++
	}
	return p.Syntax("in \\u hexadecimal character escape")
}

func (p *Reader) Number() error {
	b, j := p.B, p.I
	if b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && '1' <= b[j] && b[j] <= '9':
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	default:
		p.I = j
		if j >= len(b) {
			return p.EOF()
		}
		return p.Syntax("in numeric literal")
	}
	if j < len(b) && b[j] == '.' {
		j++
		if j >= len(b) {
			p.I = j
			return p.EOF()
		}
		if b[j] < '0' || b[j] > '9' {
			p.I = j
			return p.Syntax("after decimal point in numeric literal")
		}
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j >= len(b) {
			p.I = j
			return p.EOF()
		}
		if b[j] < '0' || b[j] > '9' {
			p.I = j
			return p.Syntax("in exponent of numeric literal")
		}
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	}
	p.I = j
	return nil
}

// Lit moves past the literal word, or reports where it goes wrong.
func (p *Reader) Lit(word string) error {
	for k := 0; k < len(word); k++ {
		if p.I >= len(p.B) {
			return p.EOF()
		}
		if p.B[p.I] != word[k] {
			return p.Syntax("in literal " + word + " (expecting " + strconv.QuoteRune(rune(word[k])) + ")")
		}
		p.I++
	}
	return nil
}

// Literal moves past word and reports true when it is next.
func (p *Reader) Literal(word string) bool {
	if bytes.HasPrefix(p.B[p.I:], []byte(word)) {
		p.I += len(word)
		return true
	}
	return false
}

func (p *Reader) WS() {
	for p.I < len(p.B) {
		switch p.B[p.I] {
		case ' ', '\t', '\n', '\r':
			p.I++
		default:
			return
		}
	}
}

func (p *Reader) EOF() error {
	if p.Quiet {
		return ErrNotJSON
	}
	return p.errorf("malformed JSON: unexpected end of input")
}

func (p *Reader) Syntax(context string) error {
	if p.Quiet {
		return ErrNotJSON
	}
	if p.I >= len(p.B) {
		return p.EOF()
	}
	return p.errorf("malformed JSON at byte %d: invalid character %s %s", p.I+1, QuoteChar(p.B[p.I]), context)
}

// TypeError reports a value of the wrong JSON type for field, after
// checking that the value is at least well-formed JSON (a syntax error
// wins, as with encoding/json).
func (p *Reader) TypeError(field, want string) error {
	got := "value"
	if p.I < len(p.B) {
		switch c := p.B[p.I]; {
		case c == '"':
			got = "string"
		case c == '{':
			got = "object"
		case c == '[':
			got = "array"
		case c == 't' || c == 'f':
			got = "bool"
		case c == '-' || ('0' <= c && c <= '9'):
			got = "number"
		}
	}
	if err := p.Value(1); err != nil {
		return err
	}
	return p.errorf("%s: expected %s, got %s", field, want, got)
}

// QuoteChar formats a byte as encoding/json's syntax errors do.
func QuoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}
