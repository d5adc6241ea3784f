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
	"github.com/combmq/comb/internal/handjson"
	"github.com/combmq/comb/protocol"
)

// The loader's own client of Comb's wire protocol (ClientRaw). It sends
// the same requests as clients/go, but writes them with appends from
// bodies it prepares once: on a two-core machine that also runs the broker
// and PostgreSQL, every microsecond the loader spends per message is taken
// from what it measures. clients/go validates and compacts each message's
// JSON on a push; this client knows its payloads are valid JSON strings
// (or binary) and writes them as they are. It reads replies with
// clients/go's own readers (comb.DecodePopReply, comb.DecodeAckReply),
// which are written by hand too. Only the request bodies are the loader's:
// subjects, headers, statuses and errors come from the protocol package,
// errors are *protocol.Error (which comb.Error is), so errors.Is with the
// sentinels works alike, and rawwire_test.go holds the bodies against
// internal/wire's decoders. Deliveries, acks and ack results are
// clients/go's types, so that both clients feed one consumer loop.

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
		b = handjson.AppendString(b, partition)
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
	b = handjson.AppendString(b, o.Group)
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
	out, err = comb.DecodePopReply(reply, c.queue, out)
	if err != nil {
		return out, fmt.Errorf("pop %s: %w", c.queue, err)
	}
	return out, nil
}

// popAcking sends a pop whose body (popRequestBody's) carries acks, and
// returns the deliveries and one result per ack.
func (c *rawClient) popAcking(ctx context.Context, body []byte, wait time.Duration, acks []comb.Ack, out []comb.Delivery) ([]comb.Delivery, []comb.AckResult, error) {
	reply, err := c.request(ctx, "pop", c.subPop, popAckingBody(body, acks), wait)
	if err != nil {
		return out, nil, err
	}
	out, res, err := comb.DecodePopAckReply(reply, c.queue, len(acks), out)
	if err != nil {
		return out, nil, fmt.Errorf("pop %s: %w", c.queue, err)
	}
	return out, res, nil
}

// popAckingBody is a pop request's body (popRequestBody's) carrying acks.
func popAckingBody(body []byte, acks []comb.Ack) []byte {
	b := append(body[:len(body)-1:len(body)-1], `,"acks":`...)
	return append(appendAckArray(b, acks), '}')
}

// ack sends acks and returns one result per ack.
func (c *rawClient) ack(ctx context.Context, group string, acks []comb.Ack) ([]comb.AckResult, error) {
	b := appendAckBody(nil, group, acks)
	reply, err := c.request(ctx, "ack", c.subAck, b, 0)
	if err != nil {
		return nil, err
	}
	res, err := comb.DecodeAckReply(reply)
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
	b = handjson.AppendString(b, group)
	b = append(b, `,"acks":`...)
	return append(appendAckArray(b, acks), '}')
}

// appendAckArray appends acks as a JSON array of ack objects.
func appendAckArray(b []byte, acks []comb.Ack) []byte {
	b = append(b, '[')
	for i, a := range acks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendAckMembers(b, a)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendAckMembers appends an ack's members, without braces:
// "partition":…,"offset":…,"lease":…[,"status":…].
func appendAckMembers(b []byte, a comb.Ack) []byte {
	b = append(b, `"partition":`...)
	b = handjson.AppendString(b, a.Partition)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, a.Offset, 10)
	b = append(b, `,"lease":`...)
	b = handjson.AppendString(b, a.Lease)
	if a.Status != "" {
		b = append(b, `,"status":`...)
		b = handjson.AppendString(b, a.Status)
	}
	return b
}
