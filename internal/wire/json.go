package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/combmq/comb/protocol"
)

// decodeObject decodes body, a JSON object, into v, rejecting unknown fields
// and anything after the object. An empty (or all-space) body decodes as {}
// so that every optional-only request may be sent with no body at all.
//
// encoding/json matches field names case-insensitively and lets a repeated
// key win over an earlier one; we accept both rather than pay for a second
// pass over every body. It also turns invalid UTF-8 and lone surrogate
// escapes in strings into U+FFFD, which would let different bytes alias
// one name: those bodies are refused first, naming the field (these bodies
// carry names, leases and times, never message bytes).
func decodeObject(body []byte, v any) error {
	i := skipSpace(body, 0)
	if i == len(body) {
		return nil
	}
	if body[i] != '{' {
		return badRequest("request body must be a JSON object")
	}
	if err := checkStrings(body); err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// decodeJSON is decodeObject without the string check, for a body that
// starts with '{'.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, "")
	}
	if off := int(dec.InputOffset()); skipSpace(body, off) != len(body) {
		return badRequest("malformed JSON: unexpected data after the object at byte %d", off)
	}
	return nil
}

// decodeElements re-decodes, one by one, the elements of the array in field
// of body into fresh values from newElem, and returns the first element's
// error with its index ("messages[3].data_b64: …"). The whole-body decoder
// reports type errors and unknown fields without an index; this runs only
// on that error path, to tell the client which element is wrong.
func decodeElements(body []byte, field string, newElem func() any) *protocol.Error {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil
	}
	var raw json.RawMessage
	for k, v := range top {
		if strings.EqualFold(k, field) {
			raw = v
		}
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return nil
	}
	for i, e := range elems {
		dec := json.NewDecoder(bytes.NewReader(e))
		dec.DisallowUnknownFields()
		if err := dec.Decode(newElem()); err != nil {
			return jsonError(err, field+"["+strconv.Itoa(i)+"]")
		}
	}
	return nil
}

// jsonError turns an encoding/json error into a 400 that names the field
// (prefixed with path) and what was expected, in words a client can act on.
func jsonError(err error, path string) *protocol.Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badRequest("malformed JSON at byte %d: %s", se.Offset, se.Error())
	case errors.As(err, &te):
		field := joinPath(path, te.Field)
		if field == "" {
			field = "request body"
		}
		return badRequest("%s: expected %s, got %s", field, typeWords(te.Type), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("malformed JSON: unexpected end of input")
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if path != "" {
		msg = path + ": " + msg
	}
	return badRequest("%s", msg)
}

func joinPath(path, field string) string {
	switch {
	case path == "":
		return field
	case field == "":
		return path
	}
	return path + "." + field
}

// typeWords names a Go type the way a JSON client thinks of it.
func typeWords(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// checkStrings refuses a body with a string that encoding/json would not
// decode to its own bytes: invalid UTF-8, or a \u escape of a lone
// surrogate. The common body is valid UTF-8 without surrogate escapes and
// costs one pass; the others are walked to name the field. A body that is
// not JSON passes, for encoding/json to describe.
func checkStrings(body []byte) error {
	if utf8.Valid(body) && !mayHaveSurrogate(body) {
		return nil
	}
	p := newPushParser(body)
	p.WS()
	err := p.walkStrings("")
	if we, ok := protocol.AsError(err); ok && strings.HasPrefix(we.Message, "@") {
		return badRequest("%s", we.Message[1:])
	}
	return nil
}

// mayHaveSurrogate reports whether b holds \uD800-\uDFFF (either case); it
// may be wrong about an escaped backslash followed by "ud8…", which only
// costs a walk.
func mayHaveSurrogate(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u`))
		if i < 0 || i+3 >= len(b) {
			return false
		}
		if c, d := b[i+2], b[i+3]; (c == 'd' || c == 'D') && strings.IndexByte("89abcdefABCDEF", d) >= 0 {
			return true
		}
		b = b[i+2:]
	}
}

// walkStrings walks the value at p.I and returns, for the first string
// whose value is not its bytes, a 400 whose message starts with "@" (so the
// caller can tell it from a syntax error): "acks[2].partition: invalid
// UTF-8 at byte 31".
func (p *pushParser) walkStrings(path string) error {
	if p.I >= len(p.B) {
		return p.EOF()
	}
	switch p.B[p.I] {
	case '{':
		return p.Object(func(key []byte) error {
			p.WS()
			return p.walkStrings(joinPath(path, string(key)))
		})
	case '[':
		p.I++
		for n := 0; ; n++ {
			p.WS()
			if n == 0 && p.I < len(p.B) && p.B[p.I] == ']' {
				p.I++
				return nil
			}
			if err := p.walkStrings(path + "[" + strconv.Itoa(n) + "]"); err != nil {
				return err
			}
			if done, err := p.Sep(']', "after array element"); err != nil || done {
				return err
			}
		}
	case '"':
		if _, err := p.Str(); err != nil {
			return err
		}
		if p.Bad != nil {
			if path == "" {
				path = "request body"
			}
			return badRequest("@%s: %s at byte %d", path, p.Bad.What, p.Bad.At)
		}
		return nil
	}
	return p.Value(1)
}
