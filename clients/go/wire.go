package comb

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/combmq/comb/internal/handjson"
	"github.com/combmq/comb/protocol"
	"github.com/nats-io/nats.go"
)

// The replies of the hot verbs (push and put, pop, ack, txn) are read by
// hand, with jsonread, rather than by encoding/json's reflection: decoding
// a pop of one message that way took 5 µs and 13 allocations, most of
// what the client added to a request (docs/benchmarks.md, "What the
// clients add to a request"). The hand-written reader takes the broker's
// replies as they are written; anything else (a null where a value was
// expected, a key in other case, a repeated list, a syntax error) makes it
// give up, and encoding/json decodes the body into the protocol's types as
// before, so that every body gets encoding/json's answer and its error.
// FuzzRepliesMatchEncodingJSON holds the two together.

// errSlow is the reader giving up on a body it does not take as it is.
var errSlow = errors.New("not a plain reply")

// DecodePopReply reads the body of a pop reply (docs/protocol.md) as Pop
// does, for a program that sends its own pop requests over NATS, as
// Comb's loader does; an error reply is not one (see ReplyError). It appends the deliveries to out, in order, and
// returns it. Each Delivery's Queue is queue; with queue "" (the reply of
// a namespace pop) each keeps the queue its message names, and a message
// that names none is an error. Data may share body's memory.
func DecodePopReply(body []byte, queue string, out []Delivery) ([]Delivery, error) {
	n := len(out)
	res, err := scanPop(body, out)
	if errors.Is(err, errSlow) {
		res, err = decodePopJSON(body, out[:n])
	}
	if err != nil {
		return out[:n], err
	}
	if res == nil {
		res = []Delivery{}
	}
	for i := n; i < len(res); i++ {
		d := &res[i]
		switch {
		case queue != "":
			d.Queue = queue
		case d.Queue == "":
			return out[:n], fmt.Errorf("message %s/%d names no queue", d.Partition, d.Offset)
		}
	}
	return res, nil
}

// DecodePopAckReply reads the body of the reply of a pop that carried n
// acks (AckAndPop): the deliveries, appended to out as DecodePopReply
// appends them, and one result per ack, in order; a reply with another
// number of results is an error. The broker writes the acks' results
// last, and they hold no text of the messages, so the last `,"acks":[` of
// the body is where they start, whatever the messages' data holds.
func DecodePopAckReply(body []byte, queue string, n int, out []Delivery) ([]Delivery, []AckResult, error) {
	const key = `,"acks":`
	i := bytes.LastIndex(body, []byte(key+"["))
	if i < 0 || body[len(body)-1] != '}' {
		return out, nil, fmt.Errorf("no acks in the reply %.200q", body)
	}
	res, err := DecodeAckReply(append([]byte(`{"results":`), body[i+len(key):]...))
	if err != nil {
		return out, nil, fmt.Errorf("acks: %w", err)
	}
	if len(res) != n {
		return out, nil, fmt.Errorf("%d results for %d acks", len(res), n)
	}
	out, err = DecodePopReply(append(body[:i:i], '}'), queue, out)
	if err != nil {
		return out, nil, err
	}
	return out, res, nil
}

// DecodeAckReply reads the body of an ack reply as Ack does: one result
// per ack, in order.
func DecodeAckReply(body []byte) ([]AckResult, error) {
	res, err := scanAck(body)
	if errors.Is(err, errSlow) {
		return decodeAckJSON(body)
	}
	return res, err
}

// DecodeTxnReply reads the body of a txn reply as Txn does, without
// checking the counts against a request.
func DecodeTxnReply(body []byte) (TxnResult, error) {
	res, err := scanTxn(body)
	if errors.Is(err, errSlow) {
		return decodeTxnJSON(body)
	}
	return res, err
}

// decodePushReply reads the results of a push or put reply.
func decodePushReply(body []byte) ([]PushResult, error) {
	res, err := scanPush(body)
	if errors.Is(err, errSlow) {
		return decodePushJSON(body)
	}
	return res, err
}

// The reference decoders: encoding/json into the protocol's types, then
// the client's forms.

func decodeAckJSON(body []byte) ([]AckResult, error) {
	var rep protocol.AckReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("decode reply: %w", err)
	}
	res := make([]AckResult, len(rep.Results))
	for i, r := range rep.Results {
		res[i] = AckResult(r)
	}
	return res, nil
}

func decodeTxnJSON(body []byte) (TxnResult, error) {
	var rep protocol.TxnReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return TxnResult{}, fmt.Errorf("decode reply: %w", err)
	}
	out := TxnResult{Acks: make([]AckResult, len(rep.Acks)), Push: make([][]PushResult, len(rep.Push))}
	for i, r := range rep.Acks {
		out.Acks[i] = AckResult(r)
	}
	for i, r := range rep.Push {
		out.Push[i] = r.Results
	}
	return out, nil
}

func decodePushJSON(body []byte) ([]PushResult, error) {
	var rep protocol.PushReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("decode reply: %w", err)
	}
	return rep.Results, nil
}

// decodePopJSON is the pop reply's reference decoder: encoding/json into
// protocol.PopReply, then each message in the client's form.
func decodePopJSON(body []byte, out []Delivery) ([]Delivery, error) {
	var rep protocol.PopReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return out, fmt.Errorf("decode reply: %w", err)
	}
	for _, m := range rep.Messages {
		d, err := delivery(m)
		if err != nil {
			return out, fmt.Errorf("message %s/%d: %w", m.Partition, m.Offset, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// scanPop reads a pop reply by hand, or returns errSlow.
func scanPop(body []byte, out []Delivery) ([]Delivery, error) {
	res, err := scanMember(body, "messages", func(r *handjson.Reader) ([]Delivery, error) {
		// A reply's messages mostly share their partition and lease:
		// each reuses the string of the one before when it is the same.
		var prev previous
		return readArray(r, out, func(r *handjson.Reader) (Delivery, error) {
			return readDelivery(r, &prev)
		})
	})
	if res == nil {
		res = out // no "messages"
	}
	return res, err
}

// scanAck, scanTxn and scanPush read their replies by hand, or return
// errSlow.

func scanAck(body []byte) ([]AckResult, error) {
	res, err := scanMember(body, "results", readAckResults)
	if res == nil {
		res = []AckResult{} // as decodeAckJSON
	}
	return res, err
}

func scanTxn(body []byte) (TxnResult, error) {
	var out TxnResult
	err := scanObject(body, func(r *handjson.Reader, key []byte) (uint64, error) {
		var err error
		switch string(key) {
		case "acks":
			out.Acks, err = readAckResults(r)
		case "push":
			out.Push, err = readArray(r, nil, func(r *handjson.Reader) ([]PushResult, error) {
				return readMember(r, "results", readPushResults)
			})
		default:
			return 0, nil
		}
		return fieldBit(key), err
	}, "acks", "push")
	if out.Acks == nil {
		out.Acks = []AckResult{} // as decodeTxnJSON
	}
	if out.Push == nil {
		out.Push = [][]PushResult{}
	}
	return out, err
}

func scanPush(body []byte) ([]PushResult, error) {
	return scanMember(body, "results", readPushResults)
}

// scanMember reads body, one object, whose member name read reads; the
// others are skipped.
func scanMember[T any](body []byte, name string, read func(*handjson.Reader) (T, error)) (T, error) {
	r := &handjson.Reader{B: body, Quiet: true}
	v, err := readMember(r, name, read)
	if err != nil || r.End() != nil {
		return v, errSlow
	}
	return v, nil
}

// readMember reads the object at r.I as scanMember reads a body.
func readMember[T any](r *handjson.Reader, name string, read func(*handjson.Reader) (T, error)) (T, error) {
	var v T
	err := readObject(r, func(key []byte) (uint64, error) {
		if string(key) != name {
			return 0, nil
		}
		var err error
		v, err = read(r)
		return fieldBit(key), err
	}, name)
	return v, err
}

// previous is what a message of a pop reply may share with the next: the
// messages of one push have one partition and one creation time, and the
// messages of one pop one lease.
type previous struct {
	queue, partition, lease string
	createdRaw              []byte
	created                 time.Time
}

// readDelivery reads one message of a pop reply; prev holds the one
// before's, and gets this one's.
func readDelivery(r *handjson.Reader, prev *previous) (Delivery, error) {
	var (
		d      Delivery
		raw    []byte // "data"
		b64    []byte // "data_b64", the bytes of its string
		hasB64 bool
		hdr    protocol.Headers
	)
	err := readObject(r, func(key []byte) (uint64, error) {
		var err error
		switch string(key) {
		case "queue":
			d.Queue, err = readStringAgain(r, prev.queue)
		case "partition":
			d.Partition, err = readStringAgain(r, prev.partition)
		case "offset":
			d.Offset, err = readInt(r)
		case "id":
			d.ID, err = readString(r)
		case "lease":
			d.Lease, err = readStringAgain(r, prev.lease)
		case "attempt":
			var a int64
			a, err = readInt(r)
			if int64(int(a)) != a {
				return fieldBit(key), errSlow
			}
			d.Attempt = int(a)
		case "created_at":
			var v []byte
			switch v, err = readValue(r); {
			case err != nil:
			case prev.createdRaw != nil && string(v) == string(prev.createdRaw):
				d.CreatedAt = prev.created
			case d.CreatedAt.UnmarshalJSON(v) != nil:
				err = errSlow
			default:
				prev.createdRaw, prev.created = v, d.CreatedAt
			}
		case "headers":
			hdr, err = readHeaders(r, hdr)
		case "data":
			raw, err = readValue(r)
		case "data_b64":
			r.WS()
			if r.Literal("null") {
				b64, hasB64 = nil, false
				return fieldBit(key), nil
			}
			// Base64 is plain ASCII: its bytes are the string's, unless
			// it has escapes, which encoding/json's path decodes.
			var v []byte
			if v, err = readValue(r); err == nil {
				if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
					return fieldBit(key), errSlow
				}
				b64, hasB64 = v[1:len(v)-1], true
			}
		default:
			return 0, nil
		}
		return fieldBit(key), err
	}, "queue", "partition", "offset", "id", "lease", "attempt", "created_at", "headers", "data", "data_b64")
	if err != nil {
		return d, err
	}
	switch {
	case hasB64:
		// A failure: encoding/json's path says so, after any syntax error
		// further on.
		if d.Data, err = base64.StdEncoding.AppendDecode(make([]byte, 0, base64.StdEncoding.DecodedLen(len(b64))), b64); err != nil {
			return d, errSlow
		}
	case raw != nil:
		d.Data = raw
	}
	prev.queue, prev.partition, prev.lease = d.Queue, d.Partition, d.Lease
	d.Headers = natsHeaders(hdr)
	return d, nil
}

// readHeaders reads a message's "headers" as encoding/json decodes it
// into protocol.Headers: null is nil, an object adds its members to hdr
// (a repeated name: the last wins), a member's value is a string (one
// value), an array of strings (null elements are "") or null (no values).
func readHeaders(r *handjson.Reader, hdr protocol.Headers) (protocol.Headers, error) {
	r.WS()
	if r.Literal("null") {
		return nil, nil
	}
	if r.I >= len(r.B) || r.B[r.I] != '{' {
		return hdr, errSlow
	}
	if hdr == nil {
		hdr = protocol.Headers{}
	}
	err := r.Object(func(key []byte) error {
		name := string(key)
		r.WS()
		switch {
		case r.Literal("null"):
			hdr[name] = nil
			return nil
		case r.I < len(r.B) && r.B[r.I] == '"':
			s, err := r.Str()
			hdr[name] = protocol.HeaderValues{s}
			return err
		}
		vs, err := readArray(r, nil, func(r *handjson.Reader) (string, error) {
			r.WS()
			if r.Literal("null") {
				return "", nil
			}
			return readString(r)
		})
		hdr[name] = vs
		return err
	})
	if err != nil {
		return hdr, errSlow
	}
	return hdr, nil
}

func readAckResults(r *handjson.Reader) ([]AckResult, error) {
	return readArray(r, nil, func(r *handjson.Reader) (AckResult, error) {
		var a AckResult
		err := readObject(r, func(key []byte) (uint64, error) {
			var err error
			switch string(key) {
			case "ok":
				r.WS()
				switch {
				case r.Literal("true"):
					a.OK = true
				case r.Literal("false"):
					a.OK = false
				default:
					err = errSlow
				}
			case "error":
				a.Error, err = readString(r)
			default:
				return 0, nil
			}
			return fieldBit(key), err
		}, "ok", "error")
		return a, err
	})
}

func readPushResults(r *handjson.Reader) ([]PushResult, error) {
	return readArray(r, nil, func(r *handjson.Reader) (PushResult, error) {
		var p PushResult
		err := readObject(r, func(key []byte) (uint64, error) {
			var err error
			switch string(key) {
			case "partition":
				p.Partition, err = readString(r)
			case "offset":
				p.Offset, err = readInt(r)
			case "status":
				// Nearly always "stored": that constant, not a copy.
				p.Status, err = readStringAgain(r, protocol.StatusStored)
			default:
				return 0, nil
			}
			return fieldBit(key), err
		}, "partition", "offset", "status")
		return p, err
	})
}

// scanObject reads body, one object, calling field for each key; field
// reads the value of the keys it knows and returns fieldBit(key), else it
// returns 0 and the value is skipped. A key that names one of known in
// other case, and a repeated known key, give up (encoding/json would match
// the one and merge the other).
func scanObject(body []byte, field func(r *handjson.Reader, key []byte) (uint64, error), known ...string) error {
	r := &handjson.Reader{B: body, Quiet: true}
	if err := readObject(r, func(key []byte) (uint64, error) { return field(r, key) }, known...); err != nil {
		return errSlow
	}
	if r.End() != nil {
		return errSlow
	}
	return nil
}

// readObject reads the object at r.I as scanObject reads a body. Every
// error is errSlow; it has no other.
func readObject(r *handjson.Reader, field func(key []byte) (uint64, error), known ...string) error {
	r.WS()
	if r.I >= len(r.B) || r.B[r.I] != '{' {
		return errSlow
	}
	var seen uint64 // the fieldBit of the known keys read
	err := r.Object(func(key []byte) error {
		bit, err := field(key)
		switch {
		case err != nil:
			return err
		case bit != 0:
			if seen&bit != 0 {
				return errSlow
			}
			seen |= bit
			return nil
		}
		for _, k := range known {
			if foldsTo(key, k) {
				return errSlow
			}
		}
		r.WS()
		return r.Value(1)
	})
	if err != nil {
		return errSlow
	}
	return nil
}

// fieldBit is a member name's bit in readObject's set of the names read:
// each name the readers know has its own.
func fieldBit(key []byte) uint64 {
	switch string(key) {
	case "messages":
		return 1 << 0
	case "queue":
		return 1 << 1
	case "partition":
		return 1 << 2
	case "offset":
		return 1 << 3
	case "id":
		return 1 << 4
	case "lease":
		return 1 << 5
	case "attempt":
		return 1 << 6
	case "created_at":
		return 1 << 7
	case "headers":
		return 1 << 8
	case "data":
		return 1 << 9
	case "data_b64":
		return 1 << 10
	case "results":
		return 1 << 11
	case "ok":
		return 1 << 12
	case "error":
		return 1 << 13
	case "status":
		return 1 << 14
	case "acks":
		return 1 << 15
	case "push":
		return 1 << 16
	}
	// Not one of them: a bit they share, which at worst makes two such
	// names look repeated and leaves the body to encoding/json.
	return 1 << 63
}

// foldsTo reports whether encoding/json would match key to the field
// named name (ASCII, lower case) although they differ: in ASCII case, or
// through a non-ASCII byte, which is left to encoding/json's own folding.
func foldsTo(key []byte, name string) bool {
	if len(key) != len(name) {
		for _, c := range key {
			if c >= utf8.RuneSelf {
				return true
			}
		}
		return false
	}
	for i, c := range key {
		if c >= utf8.RuneSelf {
			return true
		}
		if c|0x20 != name[i]|0x20 {
			return false
		}
	}
	return true
}

// readArray reads the array at r.I, appending each element that elem
// reads to out. null and other values give up.
func readArray[T any](r *handjson.Reader, out []T, elem func(r *handjson.Reader) (T, error)) ([]T, error) {
	r.WS()
	if r.I >= len(r.B) || r.B[r.I] != '[' {
		return out, errSlow
	}
	r.I++
	r.WS()
	if r.I < len(r.B) && r.B[r.I] == ']' {
		r.I++
		if out == nil {
			out = []T{}
		}
		return out, nil
	}
	for {
		v, err := elem(r)
		if err != nil {
			return out, err
		}
		out = append(out, v)
		if done, err := r.Sep(']', ""); err != nil || done {
			return out, err
		}
	}
}

// readString reads a string value; null and other values give up.
func readString(r *handjson.Reader) (string, error) {
	r.WS()
	if r.I >= len(r.B) || r.B[r.I] != '"' {
		return "", errSlow
	}
	return r.Str()
}

// readStringAgain is readString, returning prev itself, not a copy, when
// the string is prev written plainly.
func readStringAgain(r *handjson.Reader, prev string) (string, error) {
	if j := r.I + 1 + len(prev); prev != "" && j < len(r.B) && r.B[r.I] == '"' && r.B[j] == '"' &&
		string(r.B[r.I+1:j]) == prev && plainASCII(prev) {
		r.I = j + 1
		return prev, nil
	}
	return readString(r)
}

// plainASCII reports whether s is written in JSON as its bytes between
// quotes: printable ASCII without quote or backslash.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// readInt reads a whole number that fits an int64; anything else gives
// up.
func readInt(r *handjson.Reader) (int64, error) {
	r.WS()
	start := r.I
	if r.I >= len(r.B) || !(r.B[r.I] == '-' || '0' <= r.B[r.I] && r.B[r.I] <= '9') {
		return 0, errSlow
	}
	if err := r.Number(); err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(r.B[start:r.I]), 10, 64)
	if err != nil {
		return 0, errSlow
	}
	return v, nil
}

// readValue reads any value and returns its bytes.
func readValue(r *handjson.Reader) ([]byte, error) {
	r.WS()
	start := r.I
	if err := r.Value(1); err != nil {
		return nil, err
	}
	return r.B[start:r.I:r.I], nil
}

// The bodies of pop and ack requests are written by hand too, as
// encoding/json would write protocol.PopRequest and protocol.AckRequest
// (the same members, in the same order, left out when empty);
// FuzzRequestsMatchEncodingJSON holds them together.

// appendPopRequest appends the body of a pop request to b.
func appendPopRequest(b []byte, o PopOptions, acks []Ack) []byte {
	b = append(b, '{')
	n := len(b)
	str := func(name, v string) {
		if v != "" {
			b = member(b, n, name)
			b = handjson.AppendString(b, v)
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			b = member(b, n, name)
			b = strconv.AppendInt(b, v, 10)
		}
	}
	str("group", o.Group)
	str("partition", o.Partition)
	num("max", int64(o.Max))
	num("partitions", int64(o.Partitions))
	num("wait_ms", durationMS(o.Wait))
	num("lease_ms", durationMS(o.Lease))
	if o.AutoAck {
		b = append(member(b, n, "auto_ack"), "true"...)
	}
	str("from", o.From)
	if len(acks) > 0 {
		b = appendAcks(member(b, n, "acks"), acks)
	}
	return append(b, '}')
}

// appendAckRequest appends the body of an ack request to b.
func appendAckRequest(b []byte, group string, acks []Ack) []byte {
	b = append(b, '{')
	if group != "" {
		b = append(b, `"group":`...)
		b = handjson.AppendString(b, group)
		b = append(b, ',')
	}
	b = append(b, `"acks":`...)
	b = appendAcks(b, acks)
	return append(b, '}')
}

// appendAcks appends acks as the "acks" array of an ack request (or of a
// pop that carries them).
func appendAcks(b []byte, acks []Ack) []byte {
	b = append(b, '[')
	for i, a := range acks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if a.Partition != "" {
			b = append(b, `"partition":`...)
			b = handjson.AppendString(b, a.Partition)
			b = append(b, ',')
		}
		b = append(b, `"offset":`...)
		b = strconv.AppendInt(b, a.Offset, 10)
		b = append(b, `,"lease":`...)
		b = handjson.AppendString(b, a.Lease)
		if a.Status != "" {
			b = append(b, `,"status":`...)
			b = handjson.AppendString(b, a.Status)
		}
		if a.Delay != nil {
			b = append(b, `,"delay_ms":`...)
			b = strconv.AppendInt(b, a.Delay.Milliseconds(), 10)
		}
		if a.Error != "" {
			b = append(b, `,"error":`...)
			b = handjson.AppendString(b, a.Error)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// member appends a member's name and colon to an object opened at b[:n],
// after a comma unless it is the first.
func member(b []byte, n int, name string) []byte {
	if len(b) > n {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

// appendPushRequest appends the body of a push of msgs to b, as
// encoding/json writes a protocol.PushRequest of their pushMessage forms;
// headers gives each message's headers from its own (Push adds the trace
// context there).
func appendPushRequest(b []byte, msgs []Message, headers func(nats.Header) nats.Header) []byte {
	b = append(b, `{"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		m.Headers = headers(m.Headers)
		b = appendPushMessage(b, m)
	}
	return append(b, "]}"...)
}

// pushRequestSize is about the length of msgs' push body: base64 for
// every message, so that one allocation mostly suffices.
func pushRequestSize(msgs []Message) int {
	n := 16
	for _, m := range msgs {
		n += 64 + len(m.Partition) + len(m.ID) + base64.StdEncoding.EncodedLen(len(m.Data))
	}
	return n
}

// appendPushMessage appends one message of a push, as encoding/json
// writes protocol.PushMessage: partition, id, data or data_b64, headers
// (names sorted, values arrays), delay_ms and not_before, each left out
// when empty.
func appendPushMessage(b []byte, m Message) []byte {
	b = append(b, '{')
	n := len(b)
	if m.Partition != "" {
		b = handjson.AppendString(member(b, n, "partition"), m.Partition)
	}
	if m.ID != "" {
		b = handjson.AppendString(member(b, n, "id"), m.ID)
	}
	if isCompactJSON(m.Data) {
		b = append(member(b, n, "data"), m.Data...)
	} else {
		b = append(member(b, n, "data_b64"), '"')
		b = base64.StdEncoding.AppendEncode(b, m.Data)
		b = append(b, '"')
	}
	if len(m.Headers) > 0 {
		b = appendHeaders(member(b, n, "headers"), m.Headers)
	}
	if ms := durationMS(m.Delay); ms != 0 {
		b = strconv.AppendInt(member(b, n, "delay_ms"), ms, 10)
	}
	if !m.NotBefore.IsZero() {
		b = append(member(b, n, "not_before"), '"')
		b = m.NotBefore.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendHeaders appends headers as encoding/json writes protocol.Headers:
// an object of the names in byte order, each with its values as an array
// (null for a nil slice).
func appendHeaders(b []byte, h nats.Header) []byte {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	b = append(b, '{')
	for i, k := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(handjson.AppendString(b, k), ':')
		vs := h[k]
		if vs == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '[')
		for j, v := range vs {
			if j > 0 {
				b = append(b, ',')
			}
			b = handjson.AppendString(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// isCompactJSON reports whether message bytes travel as "data": one valid
// JSON value in valid UTF-8 with no space outside its strings, which
// encoding/json (and the broker) keep byte for byte. Anything else goes
// as "data_b64".
func isCompactJSON(b []byte) bool {
	return len(b) > 0 && utf8.Valid(b) && handjson.Valid(b) && !spaceOutsideStrings(b)
}

// spaceOutsideStrings reports whether valid JSON b has space between its
// tokens.
func spaceOutsideStrings(b []byte) bool {
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if in {
			switch c {
			case '\\':
				i++
			case '"':
				in = false
			}
			continue
		}
		switch c {
		case '"':
			in = true
		case ' ', '\t', '\n', '\r':
			return true
		}
	}
	return false
}
