package wire

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/handjson"
	"github.com/combmq/comb/protocol"
)

// A push body is parsed by hand: it is the one request that carries many
// messages, and encoding/json spends most of its time there on reflection,
// a second scan and copies. The parser accepts exactly what encoding/json
// would decode into pushJSON (field names matched as bytes.EqualFold does,
// a repeated field wins, null leaves a string field as it was), which
// FuzzPushParserMatchesEncodingJSON checks; message bytes given as "data"
// are sliced from the body, never re-encoded.

// pushParser is a handjson.Reader whose errors are 400s, with the push
// and transaction bodies' own fields on top.
type pushParser struct {
	handjson.Reader
}

func newPushParser(b []byte) pushParser {
	return pushParser{handjson.Reader{B: b, Errorf: badRequestErr}}
}

func badRequestErr(format string, args ...any) error { return badRequest(format, args...) }

// validJSON reports whether b is exactly one JSON value, as json.Valid
// does but without the surrounding space json.Valid allows.
func validJSON(b []byte) bool { return handjson.Valid(b) }

// parsePush parses a push body into messages with Partition, ID and either
// Data (the raw bytes of "data", aliasing body) or B64 set.
// The parsed messages are appended to buf[:0], whose room is reused.
func parsePush(body []byte, buf []rawMessage) ([]rawMessage, error) {
	p := newPushParser(body)
	p.WS()
	if p.I == len(p.B) {
		return nil, nil
	}
	if p.B[p.I] != '{' {
		return nil, badRequest("request body must be a JSON object")
	}
	msgs := buf[:0]
	err := p.Object(func(key []byte) error {
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
	p.WS()
	if p.I != len(p.B) {
		return nil, badRequest("malformed JSON: unexpected data after the object at byte %d", p.I)
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
	p.WS()
	if p.Literal("null") {
		return nil, nil
	}
	if p.I >= len(p.B) || p.B[p.I] != '[' {
		return nil, p.TypeError("messages", "an array")
	}
	p.I++
	p.WS()
	if p.I < len(p.B) && p.B[p.I] == ']' {
		p.I++
		return out, nil
	}
	for n := 0; ; n++ {
		// Parsed in place: a message parsed in a local of its own would
		// be one more allocation, as the parser's closures capture it.
		out = append(out, rawMessage{})
		if err := p.message(&out[len(out)-1], n); err != nil {
			return nil, err
		}
		done, err := p.Sep(']', "after array element")
		if err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
	}
}

func (p *pushParser) message(m *rawMessage, n int) error {
	p.WS()
	if p.Literal("null") {
		return nil
	}
	if p.I >= len(p.B) || p.B[p.I] != '{' {
		return p.TypeError("messages["+strconv.Itoa(n)+"]", "an object")
	}
	return p.Object(func(key []byte) error {
		switch {
		case fieldIs(key, "data"):
			p.WS()
			start := p.I
			if err := p.Value(1); err != nil {
				return err
			}
			m.data = p.B[start:p.I:p.I]
		case fieldIs(key, "data_b64"):
			p.WS()
			if p.Literal("null") {
				m.b64 = nil
				return nil
			}
			if p.I >= len(p.B) || p.B[p.I] != '"' {
				return p.TypeError("messages["+strconv.Itoa(n)+"].data_b64", "a string")
			}
			// Decoded as encoding/json does: bytes that are not UTF-8
			// become U+FFFD, which no base64 holds, so such a value is
			// refused when decoded, unless a later data_b64 replaces it.
			s, err := p.Str()
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
	p.WS()
	if p.Literal("null") {
		*dst = nil
		m.badHeader = nil
		return nil
	}
	if p.I >= len(p.B) || p.B[p.I] != '{' {
		return p.TypeError(where, "an object of strings or arrays of strings")
	}
	if *dst == nil {
		*dst = protocol.Headers{}
	}
	p.Bad = nil // key() sets it only when it decodes a key slowly
	return p.Object(func(key []byte) error {
		name := string(key)
		if p.Bad != nil {
			m.noteBadHeader(name, headerProblem{badRequest("%s: %s at byte %d", where, p.Bad.What, p.Bad.At), true})
			p.Bad = nil
		} else if b, ok := m.badHeader[name]; ok && !b.key {
			delete(m.badHeader, name) // the value is replaced below
		}
		p.WS()
		if p.I >= len(p.B) {
			return p.EOF()
		}
		switch p.B[p.I] {
		case 'n':
			if err := p.Lit("null"); err != nil {
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
			return p.TypeError(where+"."+name, "a string or an array of strings")
		}
		p.I++
		vs := protocol.HeaderValues{}
		p.WS()
		if p.I < len(p.B) && p.B[p.I] == ']' {
			p.I++
			(*dst)[name] = vs
			return nil
		}
		for {
			p.WS()
			switch {
			case p.I < len(p.B) && p.B[p.I] == '"':
				s, err := p.headerString(m, where, name)
				if err != nil {
					return err
				}
				vs = append(vs, s)
			case p.Literal("null"):
				vs = append(vs, "")
			default:
				return p.TypeError(where+"."+name, "a string")
			}
			done, err := p.Sep(']', "after array element")
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

// headerString parses a header value at p.I, noting one that is not its
// bytes.
func (p *pushParser) headerString(m *rawMessage, where, name string) (string, error) {
	s, err := p.Str()
	if err == nil && p.Bad != nil {
		m.noteBadHeader(name, headerProblem{badRequest("%s.%s: %s at byte %d", where, name, p.Bad.What, p.Bad.At), false})
		p.Bad = nil
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
	p.WS()
	start := p.I
	if err := p.Value(1); err != nil {
		return err
	}
	raw := p.B[start:p.I]
	where := "messages[" + strconv.Itoa(n) + "]." + field
	if !utf8.Valid(raw) || mayHaveSurrogate(raw) {
		q := newPushParser(raw)
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
	p.WS()
	if p.Literal("null") {
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
	if p.I >= len(p.B) || p.B[p.I] != '"' {
		return "", p.TypeError("messages["+strconv.Itoa(n)+"]."+field, "a string")
	}
	s, err := p.Str()
	if err == nil && p.Bad != nil {
		return "", badRequest("messages[%d].%s: %s at byte %d", n, field, p.Bad.What, p.Bad.At)
	}
	return s, err
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
