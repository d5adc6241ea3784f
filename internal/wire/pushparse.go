package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// A push body is parsed by hand: it is the one request that carries many
// messages, and encoding/json spends most of its time there on reflection,
// a second scan and copies. The parser accepts exactly what encoding/json
// would decode into pushJSON (field names matched as bytes.EqualFold does,
// a repeated field wins, null leaves a string field as it was), which
// FuzzPushParserMatchesEncodingJSON checks; message bytes given as "data"
// are sliced from the body, never re-encoded.

// maxDepth is encoding/json's nesting limit, kept for the same answers.
const maxDepth = 10000

type pushParser struct {
	b []byte
	i int
	// quiet makes errors the bare errNotJSON, for validity checks that
	// only want a yes or no and must not pay for messages.
	quiet bool
	// bad records the first thing the last str call replaced with U+FFFD
	// (invalid UTF-8, a lone surrogate escape), as encoding/json would: a
	// name must be refused rather than stored under the replacement.
	bad *strProblem
}

// strProblem is where a string stopped being the bytes it decodes to.
type strProblem struct {
	at   int    // byte offset in the body
	what string // "invalid UTF-8" or `a lone surrogate \ud800`
}

var errNotJSON = errors.New("not JSON")

// validJSON reports whether b is exactly one JSON value, as json.Valid
// does but without the surrounding space json.Valid allows.
func validJSON(b []byte) bool {
	p := pushParser{b: b, quiet: true}
	return p.value(1) == nil && p.i == len(b)
}

// parsePush parses a push body into messages with Partition, ID and either
// Data (the raw bytes of "data", aliasing body) or B64 set.
// The parsed messages are appended to buf[:0], whose room is reused.
func parsePush(body []byte, buf []rawMessage) ([]rawMessage, error) {
	p := pushParser{b: body}
	p.ws()
	if p.i == len(p.b) {
		return nil, nil
	}
	if p.b[p.i] != '{' {
		return nil, badRequest("request body must be a JSON object")
	}
	msgs := buf[:0]
	err := p.object(func(key []byte) error {
		if !fieldIs(key, "messages") {
			return badRequest("unknown field %q", key)
		}
		var err error
		msgs, err = p.messages(msgs[:0])
		return err
	})
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, badRequest("malformed JSON: unexpected data after the object at byte %d", p.i)
	}
	return msgs, nil
}

// rawMessage is one parsed message before its checks.
type rawMessage struct {
	partition, id string
	data          []byte // nil when absent
	b64           *string
	// The rare fields are decoded by encoding/json from their slice of
	// the body: speed does not matter there, and agreeing with the
	// reference does.
	headers   protocol.Headers
	badHeader map[string]headerProblem // names of headers whose key or value is not its bytes
	delayMS   int64
	notBefore string
}

func fieldIs(key []byte, name string) bool {
	return string(key) == name || bytes.EqualFold(key, []byte(name))
}

func (p *pushParser) messages(out []rawMessage) ([]rawMessage, error) {
	p.ws()
	if p.literal("null") {
		return nil, nil
	}
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		return nil, p.typeError("messages", "an array")
	}
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return out, nil
	}
	for n := 0; ; n++ {
		// Parsed in place: a message parsed in a local of its own would
		// be one more allocation, as the parser's closures capture it.
		out = append(out, rawMessage{})
		if err := p.message(&out[len(out)-1], n); err != nil {
			return nil, err
		}
		done, err := p.sep(']', "after array element")
		if err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
	}
}

func (p *pushParser) message(m *rawMessage, n int) error {
	p.ws()
	if p.literal("null") {
		return nil
	}
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return p.typeError("messages["+strconv.Itoa(n)+"]", "an object")
	}
	return p.object(func(key []byte) error {
		switch {
		case fieldIs(key, "data"):
			p.ws()
			start := p.i
			if err := p.value(1); err != nil {
				return err
			}
			m.data = p.b[start:p.i:p.i]
		case fieldIs(key, "data_b64"):
			p.ws()
			if p.literal("null") {
				m.b64 = nil
				return nil
			}
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return p.typeError("messages["+strconv.Itoa(n)+"].data_b64", "a string")
			}
			// Decoded as encoding/json does: bytes that are not UTF-8
			// become U+FFFD, which no base64 holds, so such a value is
			// refused when decoded, unless a later data_b64 replaces it.
			s, err := p.str()
			if err != nil {
				return err
			}
			m.b64 = &s
		case fieldIs(key, "partition"):
			return p.optString(&m.partition, n, "partition")
		case fieldIs(key, "id"):
			return p.optString(&m.id, n, "id")
		case fieldIs(key, "headers"):
			return p.headers(m, n)
		case fieldIs(key, "delay_ms"):
			return p.rare(&m.delayMS, n, "delay_ms", "a whole number")
		case fieldIs(key, "not_before"):
			return p.rare(&m.notBefore, n, "not_before", "a string")
		default:
			return badRequest("messages[%d]: unknown field %q", n, key)
		}
		return nil
	})
}

// headers parses a message's "headers" into dst as encoding/json decodes
// it into protocol.Headers: null sets dst to nil, an object adds its
// members to dst (a repeated name: the last wins), a member's value is a
// string (one value), an array of strings (null elements are ""), or null
// (no values, refused later). Strings that are not their bytes are
// refused, as in names. Hand-written like the rest of the parser: through
// encoding/json a 256-byte header cost 14 µs per message, more than the
// whole rest of a push (FuzzPushParserMatchesEncodingJSON holds the two
// together).
//
// A key or value that is not its bytes is refused once the message is
// parsed (rawMessage.headerError), not at once: a later "headers":null, or
// a later good value of the same name, would make encoding/json forget it.
func (p *pushParser) headers(m *rawMessage, n int) error {
	dst := &m.headers
	where := "messages[" + strconv.Itoa(n) + "].headers"
	p.ws()
	if p.literal("null") {
		*dst = nil
		m.badHeader = nil
		return nil
	}
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return p.typeError(where, "an object of strings or arrays of strings")
	}
	if *dst == nil {
		*dst = protocol.Headers{}
	}
	p.bad = nil // key() sets it only when it decodes a key slowly
	return p.object(func(key []byte) error {
		name := string(key)
		if p.bad != nil {
			m.noteBadHeader(name, headerProblem{badRequest("%s: %s at byte %d", where, p.bad.what, p.bad.at), true})
			p.bad = nil
		} else if b, ok := m.badHeader[name]; ok && !b.key {
			delete(m.badHeader, name) // the value is replaced below
		}
		p.ws()
		if p.i >= len(p.b) {
			return p.eof()
		}
		switch p.b[p.i] {
		case 'n':
			if err := p.lit("null"); err != nil {
				return err
			}
			(*dst)[name] = nil
			return nil
		case '"':
			s, err := p.headerString(m, where, name)
			if err != nil {
				return err
			}
			(*dst)[name] = protocol.HeaderValues{s}
			return nil
		case '[':
		default:
			return p.typeError(where+"."+name, "a string or an array of strings")
		}
		p.i++
		vs := protocol.HeaderValues{}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			(*dst)[name] = vs
			return nil
		}
		for {
			p.ws()
			switch {
			case p.i < len(p.b) && p.b[p.i] == '"':
				s, err := p.headerString(m, where, name)
				if err != nil {
					return err
				}
				vs = append(vs, s)
			case p.literal("null"):
				vs = append(vs, "")
			default:
				return p.typeError(where+"."+name, "a string")
			}
			done, err := p.sep(']', "after array element")
			if err != nil {
				return err
			}
			if done {
				(*dst)[name] = vs
				return nil
			}
		}
	})
}

// headerString parses a header value at p.i, noting one that is not its
// bytes.
func (p *pushParser) headerString(m *rawMessage, where, name string) (string, error) {
	s, err := p.str()
	if err == nil && p.bad != nil {
		m.noteBadHeader(name, headerProblem{badRequest("%s.%s: %s at byte %d", where, name, p.bad.what, p.bad.at), false})
		p.bad = nil
	}
	return s, err
}

// headerProblem is a header key (key) or value that is not its bytes.
type headerProblem struct {
	err error
	key bool
}

func (m *rawMessage) noteBadHeader(name string, hp headerProblem) {
	if m.badHeader == nil {
		m.badHeader = map[string]headerProblem{}
	}
	if old, ok := m.badHeader[name]; !ok || !old.key {
		m.badHeader[name] = hp
	}
}

// headerError is the refusal of a header still not its bytes once the
// message is parsed, for the first such name in byte order.
func (m *rawMessage) headerError() error {
	if len(m.badHeader) == 0 {
		return nil
	}
	names := make([]string, 0, len(m.badHeader))
	for k := range m.badHeader {
		names = append(names, k)
	}
	slices.Sort(names)
	return m.badHeader[names[0]].err
}

// rare parses the value of one of a message's rare fields with
// encoding/json into dst, as the reference decoder would, after refusing
// strings that are not their bytes (as for names).
func (p *pushParser) rare(dst any, n int, field, want string) error {
	p.ws()
	start := p.i
	if err := p.value(1); err != nil {
		return err
	}
	raw := p.b[start:p.i]
	where := "messages[" + strconv.Itoa(n) + "]." + field
	if !utf8.Valid(raw) || mayHaveSurrogate(raw) {
		q := pushParser{b: raw}
		if err := q.walkStrings(where); err != nil {
			if we, ok := protocol.AsError(err); ok && strings.HasPrefix(we.Message, "@") {
				return badRequest("%s", we.Message[1:])
			}
			return err
		}
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return badRequest("%s: expected %s", where, want)
	}
	return nil
}

// optString parses a string field; null leaves it as it was.
func (p *pushParser) optString(dst *string, n int, field string) error {
	p.ws()
	if p.literal("null") {
		return nil
	}
	s, err := p.stringField(n, field)
	if err != nil {
		return err
	}
	*dst = s
	return nil
}

// stringField parses a string field of message n, refusing one that is not
// valid UTF-8 or holds a lone surrogate: different bytes must never alias
// one name.
func (p *pushParser) stringField(n int, field string) (string, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", p.typeError("messages["+strconv.Itoa(n)+"]."+field, "a string")
	}
	s, err := p.str()
	if err == nil && p.bad != nil {
		return "", badRequest("messages[%d].%s: %s at byte %d", n, field, p.bad.what, p.bad.at)
	}
	return s, err
}

// object parses an object at p.i ('{' checked by the caller), calling
// field with each key while p.i is at its value, which field must consume.
func (p *pushParser) object(field func(key []byte) error) error {
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		p.ws()
		if p.i >= len(p.b) {
			return p.eof()
		}
		if p.b[p.i] != '"' {
			return p.syntax("looking for beginning of object key string")
		}
		key, err := p.key()
		if err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) {
			return p.eof()
		}
		if p.b[p.i] != ':' {
			return p.syntax("after object key")
		}
		p.i++
		if err := field(key); err != nil {
			return err
		}
		if done, err := p.sep('}', "after object key:value pair"); err != nil || done {
			return err
		}
	}
}

// key returns an object key, unescaped only when it has escapes.
func (p *pushParser) key() ([]byte, error) {
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		if c == '"' {
			p.i = j + 1
			return p.b[start:j], nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
	}
	s, err := p.str()
	return []byte(s), err
}

// str parses a JSON string at p.i and returns its value, as encoding/json
// would: invalid UTF-8 and lone surrogates become U+FFFD, and p.bad says
// where the first was.
func (p *pushParser) str() (string, error) {
	p.bad = nil
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes, ASCII or valid UTF-8.
	ascii := true
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '"':
			if ascii || utf8.Valid(p.b[start:j]) {
				p.i = j + 1
				return string(p.b[start:j]), nil
			}
			return p.strSlow(start)
		case c == '\\':
			return p.strSlow(start)
		case c < 0x20:
			p.i = j
			return "", p.syntax("in string literal")
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	p.i = len(p.b)
	return "", p.eof()
}

func (p *pushParser) strSlow(start int) (string, error) {
	out := make([]byte, 0, 32)
	j := start
	for j < len(p.b) {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return string(out), nil
		case c < 0x20:
			p.i = j
			return "", p.syntax("in string literal")
		case c == '\\':
			if j+1 >= len(p.b) {
				p.i = len(p.b)
				return "", p.eof()
			}
			switch e := p.b[j+1]; e {
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
				r, ok := hex4(p.b, j+2)
				if !ok {
					p.i = j + 2
					return "", p.badEscape()
				}
				j += 6
				if utf16.IsSurrogate(r) {
					r2, ok2 := rune(-1), false
					if j+1 < len(p.b) && p.b[j] == '\\' && p.b[j+1] == 'u' {
						r2, ok2 = hex4(p.b, j+2)
					}
					if dec := utf16.DecodeRune(r, r2); ok2 && dec != utf8.RuneError {
						r = dec
						j += 6
					} else {
						p.note(j-6, fmt.Sprintf("a lone surrogate \\u%04x", r))
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				p.i = j + 1
				return "", p.syntax("in string escape code")
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			j++
		default:
			r, size := utf8.DecodeRune(p.b[j:])
			if r == utf8.RuneError && size == 1 {
				p.note(j, "invalid UTF-8")
			}
			out = utf8.AppendRune(out, r) // RuneError for invalid bytes, as encoding/json
			j += size
		}
	}
	p.i = len(p.b)
	return "", p.eof()
}

// note records the first problem of the string being parsed.
func (p *pushParser) note(at int, what string) {
	if p.bad == nil {
		p.bad = &strProblem{at: at, what: what}
	}
}

func hex4(b []byte, i int) (rune, bool) {
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

// value checks the JSON value at p.i and moves past it.
func (p *pushParser) value(depth int) error {
	if depth > maxDepth {
		if p.quiet {
			return errNotJSON
		}
		return badRequest("malformed JSON at byte %d: exceeded max depth", p.i)
	}
	if p.i >= len(p.b) {
		return p.eof()
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(func([]byte) error {
			p.ws()
			return p.value(depth + 1)
		})
	case c == '[':
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			p.ws()
			if err := p.value(depth + 1); err != nil {
				return err
			}
			if done, err := p.sep(']', "after array element"); err != nil || done {
				return err
			}
		}
	case c == '"':
		return p.skipString()
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	}
	return p.syntax("looking for beginning of value")
}

// skipString moves past a string, checking it as encoding/json's scanner
// does (any byte but control characters, valid escapes).
func (p *pushParser) skipString() error {
	j := p.i + 1
	for j < len(p.b) {
		// Most bytes of a string need no look: skip them in a tight loop
		// (message data is mostly such bytes, and this is the push path's
		// hottest loop).
		for j < len(p.b) && !stringSpecial[p.b[j]] {
			j++
		}
		if j >= len(p.b) {
			break
		}
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return nil
		case c < 0x20:
			p.i = j
			return p.syntax("in string literal")
		case c == '\\':
			if j+1 >= len(p.b) {
				p.i = len(p.b)
				return p.eof()
			}
			switch p.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if _, ok := hex4(p.b, j+2); !ok {
					p.i = j + 2
					return p.badEscape()
				}
				j += 6
			default:
				p.i = j + 1
				return p.syntax("in string escape code")
			}
		default:
			j++
		}
	}
	p.i = len(p.b)
	return p.eof()
}

// sep reads what follows an element of an object or array: a comma (more
// elements follow) or closer (done). where names the place for a syntax
// error, as encoding/json does.
func (p *pushParser) sep(closer byte, where string) (done bool, err error) {
	p.ws()
	if p.i >= len(p.b) {
		return false, p.eof()
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return false, nil
	case closer:
		p.i++
		return true, nil
	}
	return false, p.syntax(where)
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
func (p *pushParser) badEscape() error {
	for k := 0; k < 4; k++ {
		if p.i >= len(p.b) {
			return p.eof()
		}
		c := p.b[p.i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return p.syntax("in \\u hexadecimal character escape")
		}
		p.i++
	}
	return p.syntax("in \\u hexadecimal character escape")
}

func (p *pushParser) number() error {
	b, j := p.b, p.i
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
		p.i = j
		if j >= len(b) {
			return p.eof()
		}
		return p.syntax("in numeric literal")
	}
	if j < len(b) && b[j] == '.' {
		j++
		if j >= len(b) {
			p.i = j
			return p.eof()
		}
		if b[j] < '0' || b[j] > '9' {
			p.i = j
			return p.syntax("after decimal point in numeric literal")
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
			p.i = j
			return p.eof()
		}
		if b[j] < '0' || b[j] > '9' {
			p.i = j
			return p.syntax("in exponent of numeric literal")
		}
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	}
	p.i = j
	return nil
}

// lit moves past the literal word, or reports where it goes wrong.
func (p *pushParser) lit(word string) error {
	for k := 0; k < len(word); k++ {
		if p.i >= len(p.b) {
			return p.eof()
		}
		if p.b[p.i] != word[k] {
			return p.syntax("in literal " + word + " (expecting " + strconv.QuoteRune(rune(word[k])) + ")")
		}
		p.i++
	}
	return nil
}

// literal moves past word and reports true when it is next.
func (p *pushParser) literal(word string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		p.i += len(word)
		return true
	}
	return false
}

func (p *pushParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *pushParser) eof() error {
	if p.quiet {
		return errNotJSON
	}
	return badRequest("malformed JSON: unexpected end of input")
}

func (p *pushParser) syntax(context string) error {
	if p.quiet {
		return errNotJSON
	}
	if p.i >= len(p.b) {
		return p.eof()
	}
	return badRequest("malformed JSON at byte %d: invalid character %s %s", p.i+1, quoteChar(p.b[p.i]), context)
}

// typeError reports a value of the wrong JSON type for field, after
// checking that the value is at least well-formed JSON (a syntax error
// wins, as with encoding/json).
func (p *pushParser) typeError(field, want string) error {
	got := "value"
	if p.i < len(p.b) {
		switch c := p.b[p.i]; {
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
	if err := p.value(1); err != nil {
		return err
	}
	return badRequest("%s: expected %s, got %s", field, want, got)
}

// quoteChar formats a byte as encoding/json's syntax errors do.
func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

// toPushMessages applies the message checks to parsed messages.
func toPushMessages(raw []rawMessage, lim Limits) ([]domain.PushMessage, error) {
	if len(raw) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	if len(raw) > protocol.MaxPushMessages {
		return nil, protocol.Errorf(protocol.CodeTooLarge, "messages: %d messages, at most %d per push", len(raw), protocol.MaxPushMessages)
	}
	out := make([]domain.PushMessage, len(raw))
	now := time.Now()
	for i := range raw {
		m := &raw[i]
		pm, err := checkMessage(m.partition, m.id, "partition", "id")
		if err != nil {
			return nil, prefixError("messages["+strconv.Itoa(i)+"]", err)
		}
		if err := m.headerError(); err != nil {
			return nil, err
		}
		switch {
		case m.data != nil && m.b64 != nil:
			return nil, badRequest("messages[%d]: both data and data_b64 given; send exactly one", i)
		case m.data != nil:
			// The parser checked the JSON and sliced it without the space
			// around it; only its strings may hold invalid UTF-8.
			pm.Data, pm.Encoding = m.data, domain.EncodingJSON
			if !utf8.Valid(m.data) {
				pm.Encoding = domain.EncodingBinary
			}
		case m.b64 != nil:
			data, err := decodeBase64(*m.b64)
			if err != nil {
				return nil, badRequest("messages[%d].data_b64: %v", i, err)
			}
			pm.Data, pm.Encoding = data, EncodingOf(data)
		default:
			return nil, badRequest("messages[%d]: one of data or data_b64 is required (an empty message is \"data_b64\":\"\")", i)
		}
		if err := checkExtras(&pm, m.headers, m.delayMS, m.notBefore, now, pushHoldFields); err != nil {
			return nil, prefixError("messages["+strconv.Itoa(i)+"]", err)
		}
		if lim.MaxMessageBytes > 0 && pm.Size() > lim.MaxMessageBytes {
			return nil, protocol.Errorf(protocol.CodeTooLarge, "messages[%d]: message is %d bytes, over the limit of %d", i, pm.Size(), lim.MaxMessageBytes)
		}
		out[i] = pm
	}
	return out, nil
}
