package loadtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// The loader's own client of Comb's wire protocol (ClientRaw). It sends
// the same requests as clients/go, but writes them with appends and reads
// replies with a small scanner instead of encoding/json's reflection: on a
// two-core machine that also runs the broker and PostgreSQL, every
// microsecond the loader spends per message is taken from what it
// measures. clients/go validates and compacts each message's JSON three
// times on a push and decodes pops by reflection, which cost the loader
// about 11 µs of CPU per message pushed, popped and acked; this client
// knows its payloads are valid JSON strings (or binary) and costs a
// fraction of that. Only the bodies are hand-written: subjects, headers,
// statuses and errors come from the protocol package, errors are
// *protocol.Error (which comb.Error is), so errors.Is with the sentinels
// works alike, and rawwire_test.go holds the bodies and the scanner
// against encoding/json and protocol's types. Deliveries, acks and ack
// results are clients/go's types, so that both clients feed one consumer
// loop.

// rawClient sends requests for one queue on one connection.
type rawClient struct {
	nc      *nats.Conn
	queue   string
	timeout time.Duration
	subPush string
	subPop  string
	subAck  string
	subTxn  string
	headers []byte // every message's "headers" object, nil for none
}

func newRawClient(nc *nats.Conn, queue string) *rawClient {
	return &rawClient{
		nc:      nc,
		queue:   queue,
		timeout: comb.DefaultTimeout,
		subPush: protocol.Subject(protocol.DefaultPrefix, protocol.VerbPush, queue),
		subPop:  protocol.Subject(protocol.DefaultPrefix, protocol.VerbPop, queue),
		subAck:  protocol.Subject(protocol.DefaultPrefix, protocol.VerbAck, queue),
		subTxn:  txnSubject,
	}
}

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// request sends body on subject and returns the reply's data, or the
// service's error as a *protocol.Error.
func (c *rawClient) request(ctx context.Context, verb, subject string, body []byte, extra time.Duration) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout+extra)
	defer cancel()
	msg := &nats.Msg{Subject: subject, Data: body}
	reply, err := c.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s %s: no reply within %s: %w", verb, c.queue, c.timeout+extra, nats.ErrTimeout)
		}
		return nil, fmt.Errorf("%s %s: %w", verb, c.queue, err)
	}
	if code := reply.Header.Get(protocol.HeaderErrorCode); code != "" {
		e := &protocol.Error{Message: reply.Header.Get(protocol.HeaderError)}
		if e.Code, err = strconv.Atoi(code); err != nil {
			e.Code = protocol.CodeInternal
		}
		// Errors are rare: encoding/json is fast enough for them.
		var body protocol.ErrorReply
		if json.Unmarshal(reply.Data, &body) == nil && body.Error.Message != "" {
			e.Message = body.Error.Message
		}
		return nil, fmt.Errorf("%s %s: %w", verb, c.queue, e)
	}
	return reply.Data, nil
}

// push sends payloads to one partition: they are valid compact JSON with
// EncodingJSON (sent as "data" unchanged), bytes otherwise ("data_b64").
// It returns how many were answered duplicate.
func (c *rawClient) push(ctx context.Context, partition string, payloads [][]byte, enc Encoding, ids msgIDs) (int, error) {
	bp := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(bp)
	b := appendPushBody((*bp)[:0], partition, payloads, enc, ids, c.headers)
	*bp = b
	reply, err := c.request(ctx, "push", c.subPush, b, 0)
	if err != nil {
		return 0, err
	}
	return checkPushReply(reply, len(payloads), ids.on())
}

// appendPushBody appends a push request's JSON to b, with the producer
// ids ids names and, unless nil, the headers object hdr on every message.
func appendPushBody(b []byte, partition string, payloads [][]byte, enc Encoding, ids msgIDs, hdr []byte) []byte {
	b = append(b, `{"messages":[`...)
	for i, p := range payloads {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"partition":`...)
		b = wire.AppendString(b, partition)
		if ids.on() {
			// Base 36 digits, '-' and the prefix's likewise: nothing to
			// escape.
			b = append(b, `,"id":"`...)
			b = ids.appendID(b, i)
			b = append(b, '"')
		}
		if hdr != nil {
			b = append(b, `,"headers":`...)
			b = append(b, hdr...)
		}
		b = appendPayload(b, p, enc)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendPayload appends a message's ,"data":… (EncodingJSON: the payload
// is valid compact JSON) or ,"data_b64":"…".
func appendPayload(b, p []byte, enc Encoding) []byte {
	if enc == EncodingJSON {
		b = append(b, `,"data":`...)
		return append(b, p...)
	}
	b = append(b, `,"data_b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, '"')
}

// checkPushReply checks that a push reply has n results, all stored (or
// spooled: durable on the broker's disk), or, when the messages carried
// producer ids, duplicate; it returns the duplicates.
func checkPushReply(reply []byte, n int, withIDs bool) (dups int, err error) {
	const key = `"status":"`
	got := 0
	for rest := reply; ; {
		i := bytes.Index(rest, []byte(key))
		if i < 0 {
			break
		}
		rest = rest[i+len(key):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 {
			return dups, fmt.Errorf("push: malformed reply %.200q", reply)
		}
		if err := pushStatus(string(rest[:end]), withIDs, &dups); err != nil {
			return dups, err
		}
		got++
	}
	if got != n {
		return dups, fmt.Errorf("push: %d results for %d messages", got, n)
	}
	return dups, nil
}

// pushStatus checks one push result's status and counts a duplicate,
// which only a message with a producer id can be.
func pushStatus(s string, withID bool, dups *int) error {
	switch {
	case s == protocol.StatusStored, s == protocol.StatusSpooled:
	case s == protocol.StatusDuplicate && withID:
		*dups++
	case withID:
		return fmt.Errorf("push: status %q", s)
	default:
		return fmt.Errorf("push: status %q for a message without a producer id", s)
	}
	return nil
}

// popRequestBody is a pop request's JSON. Unlike clients/go it writes max,
// partitions, wait_ms and lease_ms even when 0 (where clients/go leaves
// them out for the service's defaults): the loader's config validation
// keeps max and partitions at 1 or more, and a 0 there would be a 400.
func popRequestBody(o comb.PopOptions) []byte {
	b := []byte(`{"group":`)
	b = wire.AppendString(b, o.Group)
	b = append(b, `,"max":`...)
	b = strconv.AppendInt(b, int64(o.Max), 10)
	b = append(b, `,"partitions":`...)
	b = strconv.AppendInt(b, int64(o.Partitions), 10)
	b = append(b, `,"wait_ms":`...)
	b = strconv.AppendInt(b, o.Wait.Milliseconds(), 10)
	b = append(b, `,"lease_ms":`...)
	b = strconv.AppendInt(b, o.Lease.Milliseconds(), 10)
	if o.AutoAck {
		b = append(b, `,"auto_ack":true`...)
	}
	return append(b, '}')
}

// pop sends a prepared pop request and appends the deliveries to out.
// Their data may point into the reply.
func (c *rawClient) pop(ctx context.Context, body []byte, wait time.Duration, out []comb.Delivery) ([]comb.Delivery, error) {
	reply, err := c.request(ctx, "pop", c.subPop, body, wait)
	if err != nil {
		return out, err
	}
	out, err = parsePopReply(reply, out)
	if err != nil {
		return out, fmt.Errorf("pop %s: %w", c.queue, err)
	}
	return out, nil
}

// ack sends acks and returns one result per ack.
func (c *rawClient) ack(ctx context.Context, group string, acks []comb.Ack) ([]comb.AckResult, error) {
	b := appendAckBody(nil, group, acks)
	reply, err := c.request(ctx, "ack", c.subAck, b, 0)
	if err != nil {
		return nil, err
	}
	res, err := parseAckReply(reply)
	if err != nil {
		return nil, fmt.Errorf("ack %s: %w", c.queue, err)
	}
	if len(res) != len(acks) {
		return nil, fmt.Errorf("ack %s: %d results for %d acks", c.queue, len(res), len(acks))
	}
	return res, nil
}

// appendAckBody appends an ack request's JSON to b.
func appendAckBody(b []byte, group string, acks []comb.Ack) []byte {
	b = append(b, `{"group":`...)
	b = wire.AppendString(b, group)
	b = append(b, `,"acks":[`...)
	for i, a := range acks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendAckMembers(b, a)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendAckMembers appends an ack's members, without braces:
// "partition":…,"offset":…,"lease":…[,"status":…].
func appendAckMembers(b []byte, a comb.Ack) []byte {
	b = append(b, `"partition":`...)
	b = wire.AppendString(b, a.Partition)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, a.Offset, 10)
	b = append(b, `,"lease":`...)
	b = wire.AppendString(b, a.Lease)
	if a.Status != "" {
		b = append(b, `,"status":`...)
		b = wire.AppendString(b, a.Status)
	}
	return b
}

// scanner reads the JSON the bridge writes. It is a strict reader of JSON
// syntax for the parts it looks at, and skips any value it does not need,
// so fields added to the protocol later are ignored as encoding/json would.
type scanner struct {
	b []byte
	i int
}

var errSyntax = errors.New("malformed JSON reply")

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return fmt.Errorf("%w: want %q at byte %d", errSyntax, c, s.i)
	}
	s.i++
	return nil
}

// rawString returns the bytes between the quotes of a string and whether
// they hold escapes.
func (s *scanner) rawString() ([]byte, bool, error) {
	if err := s.expect('"'); err != nil {
		return nil, false, err
	}
	start, esc := s.i, false
	for {
		// Jump to the next quote; a backslash before it means escapes,
		// and the quote may be one of them.
		q := bytes.IndexByte(s.b[s.i:], '"')
		if q < 0 {
			return nil, false, fmt.Errorf("%w: unterminated string", errSyntax)
		}
		bs := bytes.IndexByte(s.b[s.i:s.i+q], '\\')
		if bs < 0 {
			s.i += q
			out := s.b[start:s.i]
			s.i++
			return out, esc, nil
		}
		esc = true
		s.i += bs + 2
		if s.i > len(s.b) {
			return nil, false, fmt.Errorf("%w: unterminated string", errSyntax)
		}
	}
}

// str reads a string value.
func (s *scanner) str() (string, error) {
	start := s.i
	raw, esc, err := s.rawString()
	if err != nil || !esc {
		return string(raw), err
	}
	var out string
	if err := json.Unmarshal(s.b[start:s.i], &out); err != nil {
		return "", fmt.Errorf("%w: %v", errSyntax, err)
	}
	return out, nil
}

func (s *scanner) int() (int64, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && (s.b[s.i] == '-' || (s.b[s.i] >= '0' && s.b[s.i] <= '9')) {
		s.i++
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: number at byte %d", errSyntax, start)
	}
	return v, nil
}

// value skips one value and returns its bytes.
func (s *scanner) value() ([]byte, error) {
	s.ws()
	start := s.i
	depth := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			if _, _, err := s.rawString(); err != nil {
				return nil, err
			}
			if depth == 0 {
				return s.b[start:s.i], nil
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				// The end of the enclosing container ends a literal.
				return bytes.TrimRight(s.b[start:s.i], " \t\r\n"), nil
			}
			depth--
			if depth == 0 {
				s.i++
				return s.b[start:s.i], nil
			}
		case ',':
			if depth == 0 {
				return bytes.TrimRight(s.b[start:s.i], " \t\r\n"), nil
			}
		}
		s.i++
	}
	if depth != 0 || start == s.i {
		return nil, fmt.Errorf("%w: truncated value", errSyntax)
	}
	return bytes.TrimRight(s.b[start:s.i], " \t\r\n"), nil
}

// object calls field for each key of an object; field reads the value.
func (s *scanner) object(field func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, _, err := s.rawString()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return fmt.Errorf("%w: want ',' or '}' at byte %d", errSyntax, s.i)
		}
	}
}

// array calls elem for each element of an array.
func (s *scanner) array(elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return fmt.Errorf("%w: want ',' or ']' at byte %d", errSyntax, s.i)
		}
	}
}

// parsePopReply reads {"messages":[{…},…]} into out.
func parsePopReply(b []byte, out []comb.Delivery) ([]comb.Delivery, error) {
	s := &scanner{b: b}
	err := s.object(func(key []byte) error {
		if string(key) != "messages" {
			_, err := s.value()
			return err
		}
		return s.array(func() error {
			var d comb.Delivery
			err := s.object(func(k []byte) error {
				var err error
				switch string(k) {
				case "partition":
					d.Partition, err = s.str()
				case "offset":
					d.Offset, err = s.int()
				case "lease":
					d.Lease, err = s.str()
				case "id":
					d.ID, err = s.str()
				case "attempt":
					var a int64
					a, err = s.int()
					d.Attempt = int(a)
				case "data":
					d.Data, err = s.value()
				case "data_b64":
					var raw []byte
					if raw, _, err = s.rawString(); err == nil {
						d.Data, err = base64.StdEncoding.AppendDecode(make([]byte, 0, base64.StdEncoding.DecodedLen(len(raw))), raw)
					}
				default:
					_, err = s.value()
				}
				return err
			})
			out = append(out, d)
			return err
		})
	})
	return out, err
}

// parseAckReply reads {"results":[{"ok":true},{"ok":false,"error":"…"}]}.
func parseAckReply(b []byte) ([]comb.AckResult, error) { return parseAckResults(b, "results") }

// parseAckResults reads the ack results in member key of a reply object,
// skipping the other members.
func parseAckResults(b []byte, key string) ([]comb.AckResult, error) {
	var out []comb.AckResult
	s := &scanner{b: b}
	err := s.object(func(k []byte) error {
		if string(k) != key {
			_, err := s.value()
			return err
		}
		return s.array(func() error {
			var r comb.AckResult
			err := s.object(func(k []byte) error {
				switch string(k) {
				case "ok":
					v, err := s.value()
					r.OK = string(v) == "true"
					return err
				case "error":
					var err error
					r.Error, err = s.str()
					return err
				}
				_, err := s.value()
				return err
			})
			out = append(out, r)
			return err
		})
	})
	return out, err
}
