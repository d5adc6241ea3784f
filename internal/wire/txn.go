package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// DecodeTxn decodes and checks a transaction body (protocol.TxnRequest):
// {"acks":[{"queue":"in","group":"g","partition":"p","offset":3,"lease":"l-…"}],
// "push":[{"queue":"out","messages":[{"id":"x","data":…}]}]}.
//
// Each ack is checked as an ack request's are, and needs a queue; each push
// needs a queue and its messages are checked as a push body's are (with the
// same parser: "data" bytes are kept as sent, names must be valid UTF-8).
// At least one ack or push is required. More than protocol.MaxAcks acks,
// more than protocol.MaxPushMessages messages in all, or a body or message
// over lim is a 413. Errors name the element: "acks[1].lease: required",
// "push[0].messages[2].data_b64: …". The queues are the tenant's; the
// caller sets QueueRef.Tenant.
func DecodeTxn(body []byte, lim Limits) (domain.TxnParams, error) {
	var out domain.TxnParams
	if err := lim.checkRequest(body); err != nil {
		return out, err
	}
	p := newPushParser(body)
	p.WS()
	if p.I < len(p.B) && p.B[p.I] != '{' {
		return out, badRequest("request body must be a JSON object")
	}
	var acks [][]byte
	var pushes []rawPush
	if p.I < len(p.B) {
		err := p.Object(func(key []byte) error {
			var err error
			switch {
			case fieldIs(key, "acks"):
				acks, err = p.elements("acks")
			case fieldIs(key, "push"):
				pushes, err = p.pushes()
			default:
				err = badRequest("unknown field %q", key)
			}
			return err
		})
		if err != nil {
			return out, err
		}
		p.WS()
		if p.I != len(p.B) {
			return out, badRequest("malformed JSON: unexpected data after the object at byte %d", p.I)
		}
	}
	if len(acks) == 0 && len(pushes) == 0 {
		return out, badRequest("acks, push: at least one ack or push is required")
	}
	if len(acks) > protocol.MaxAcks {
		return out, protocol.Errorf(protocol.CodeTooLarge, "acks: %d acks, at most %d per transaction", len(acks), protocol.MaxAcks)
	}
	n := 0
	for _, ps := range pushes {
		n += len(ps.msgs)
	}
	if n > protocol.MaxPushMessages {
		return out, protocol.Errorf(protocol.CodeTooLarge, "push: %d messages, at most %d per transaction", n, protocol.MaxPushMessages)
	}
	for i, raw := range acks {
		a, err := decodeTxnAck(i, raw)
		if err != nil {
			return domain.TxnParams{}, err
		}
		out.Acks = append(out.Acks, a)
	}
	for i, ps := range pushes {
		where := "push[" + strconv.Itoa(i) + "]"
		if ps.queue == "" {
			return domain.TxnParams{}, badRequest("%s.queue: required", where)
		}
		if err := protocol.ValidateQueue(ps.queue); err != nil {
			return domain.TxnParams{}, prefixError(where, err)
		}
		msgs, err := toPushMessages(ps.msgs, lim)
		if err != nil {
			return domain.TxnParams{}, prefixError(where, err)
		}
		out.Push = append(out.Push, domain.PushParams{Queue: domain.QueueRef{Name: ps.queue}, Messages: msgs})
	}
	return out, nil
}

// decodeTxnAck decodes and checks ack i, whose raw JSON the parser has
// checked already.
func decodeTxnAck(i int, raw []byte) (domain.TxnAck, error) {
	where := "acks[" + strconv.Itoa(i) + "]"
	if raw[0] != '{' {
		return domain.TxnAck{}, badRequest("%s: expected an object", where)
	}
	var a protocol.TxnAck
	if err := decodeAt(where, raw, &a); err != nil {
		// encoding/json names a field of the embedded Ack "Ack.offset".
		if we, ok := protocol.AsError(err); ok {
			we.Message = strings.Replace(we.Message, where+".Ack.", where+".", 1)
		}
		return domain.TxnAck{}, err
	}
	if a.Queue == "" {
		return domain.TxnAck{}, badRequest("%s.queue: required", where)
	}
	if err := protocol.ValidateQueue(a.Queue); err != nil {
		return domain.TxnAck{}, prefixError(where, err)
	}
	group := protocol.DefaultGroup
	if a.Group != "" {
		if err := protocol.ValidateName("group", a.Group); err != nil {
			return domain.TxnAck{}, prefixError(where, err)
		}
		group = a.Group
	}
	ack, err := checkAck(i, a.Ack)
	if err != nil {
		return domain.TxnAck{}, err
	}
	return domain.TxnAck{Queue: domain.QueueRef{Name: a.Queue}, Group: group, Ack: ack}, nil
}

// decodeAt decodes raw, an element at where that the parser has checked to
// be a well-formed object, into v as decodeObject would, naming where in
// its errors ("acks[1].offset: expected …", "acks[1]: unknown field …").
func decodeAt(where string, raw []byte, v any) error {
	if !utf8.Valid(raw) || mayHaveSurrogate(raw) {
		p := newPushParser(raw)
		if we, ok := protocol.AsError(p.walkStrings(where)); ok && strings.HasPrefix(we.Message, "@") {
			return badRequest("%s", we.Message[1:])
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, where)
	}
	return nil
}

// rawPush is one parsed push of a transaction before its checks.
type rawPush struct {
	queue string
	msgs  []rawMessage
}

// elements returns the raw JSON of each element of the array at p.I (nil
// for null), each checked to be well-formed.
func (p *pushParser) elements(field string) ([][]byte, error) {
	p.WS()
	if p.Literal("null") {
		return nil, nil
	}
	if p.I >= len(p.B) || p.B[p.I] != '[' {
		return nil, p.TypeError(field, "an array")
	}
	p.I++
	p.WS()
	if p.I < len(p.B) && p.B[p.I] == ']' {
		p.I++
		return nil, nil
	}
	var out [][]byte
	for {
		p.WS()
		start := p.I
		if err := p.Value(1); err != nil {
			return nil, err
		}
		out = append(out, p.B[start:p.I:p.I])
		done, err := p.Sep(']', "after array element")
		if err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
	}
}

// pushes parses the array of a transaction's pushes.
func (p *pushParser) pushes() ([]rawPush, error) {
	p.WS()
	if p.Literal("null") {
		return nil, nil
	}
	if p.I >= len(p.B) || p.B[p.I] != '[' {
		return nil, p.TypeError("push", "an array")
	}
	p.I++
	p.WS()
	if p.I < len(p.B) && p.B[p.I] == ']' {
		p.I++
		return nil, nil
	}
	var out []rawPush
	for n := 0; ; n++ {
		where := "push[" + strconv.Itoa(n) + "]"
		var ps rawPush
		p.WS()
		switch {
		case p.Literal("null"):
		case p.I >= len(p.B) || p.B[p.I] != '{':
			return nil, p.TypeError(where, "an object")
		default:
			err := p.Object(func(key []byte) error {
				switch {
				case fieldIs(key, "queue"):
					p.WS()
					if p.Literal("null") {
						return nil
					}
					if p.I >= len(p.B) || p.B[p.I] != '"' {
						return p.TypeError(where+".queue", "a string")
					}
					s, err := p.Str()
					if err == nil && p.Bad != nil {
						return badRequest("%s.queue: %s at byte %d", where, p.Bad.What, p.Bad.At)
					}
					ps.queue = s
					return err
				case fieldIs(key, "messages"):
					var err error
					ps.msgs, err = p.messages(ps.msgs[:0])
					if we, ok := protocol.AsError(err); ok && !isSyntax(we) {
						return prefixError(where, err)
					}
					return err
				}
				return badRequest("%s: unknown field %q", where, key)
			})
			if err != nil {
				return nil, err
			}
		}
		out = append(out, ps)
		done, err := p.Sep(']', "after array element")
		if err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
	}
}

// TxnReply returns a transaction's reply, protocol.TxnReply:
// {"acks":[{"ok":true}],"push":[{"results":[…]}]}, one element per ack and
// per push in request order.
func TxnReply(r domain.TxnResult) []byte {
	b := make([]byte, 0, 32+16*len(r.Acks)+80*len(r.Push))
	b = append(b, `{"acks":`...)
	// The array of an ack reply, {"results":[…]}.
	acks := AckReply(r.Acks)
	b = append(b, acks[len(`{"results":`):len(acks)-1]...)
	b = append(b, `,"push":[`...)
	for i, res := range r.Push {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, PushReply(res)...)
	}
	return append(b, "]}"...)
}
