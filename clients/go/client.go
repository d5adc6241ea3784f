package comb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/combmq/comb/protocol"
)

// Header names of a put request.
const (
	// HeaderPartition carries a put's partition.
	HeaderPartition = protocol.HeaderPartition
	// HeaderID carries a put's producer id.
	HeaderID = protocol.HeaderID
)

// DefaultPrefix is the first subject token of every request.
const DefaultPrefix = protocol.DefaultPrefix

// DefaultTimeout is how long a request waits for its reply, on top of a
// pop's long-poll time.
const DefaultTimeout = 10 * time.Second

// Client sends Comb requests over a NATS connection. It is safe for
// concurrent use; it does not own the connection.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
	prop    propagation.TextMapPropagator // nil: OpenTelemetry's global one
}

// Option configures a Client.
type Option func(*Client)

// WithPrefix sets the first subject token, for a service started with
// another prefix. The default is DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(c *Client) {
		if prefix != "" {
			c.prefix = prefix
		}
	}
}

// WithTimeout sets how long a request waits for its reply; a pop waits its
// long-poll time on top of it. A context deadline that comes earlier wins.
// The default is DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// New returns a client that sends its requests over nc.
func New(nc *nats.Conn, opts ...Option) *Client {
	c := &Client{nc: nc, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Push appends messages to a queue and returns one result per message, in
// order. The reply comes only once the messages are durable. Pushing to a
// queue that does not exist creates it with default settings.
func (c *Client) Push(ctx context.Context, queue string, msgs []Message) ([]PushResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	body := appendPushRequest(make([]byte, 0, pushRequestSize(msgs)), msgs, func(h nats.Header) nats.Header { return c.inject(ctx, h) })
	var reply []byte
	if err := c.request(ctx, protocol.VerbPush, queue, rawBody(body), nil, 0, &reply); err != nil {
		return nil, err
	}
	res, err := decodePushReply(reply)
	if err != nil {
		return nil, fmt.Errorf("comb: push %s: %w", queue, err)
	}
	if len(res) != len(msgs) {
		return nil, fmt.Errorf("comb: push %s: %d results for %d messages", queue, len(res), len(msgs))
	}
	return res, nil
}

// Put appends one message. Its bytes travel as the request body unchanged,
// and the options as headers; this is the verb to use from the nats CLI.
func (c *Client) Put(ctx context.Context, queue string, data []byte, opts PutOptions) (PushResult, error) {
	// The request's headers: the message's own, its trace context and the
	// options, in a map of its own (never the caller's).
	var hdr nats.Header
	for k, v := range c.inject(ctx, opts.Headers) {
		if hdr == nil {
			hdr = nats.Header{}
		}
		hdr[k] = v
	}
	set := func(name, v string) {
		if hdr == nil {
			hdr = nats.Header{}
		}
		hdr[name] = []string{v}
	}
	if opts.Partition != "" {
		set(HeaderPartition, opts.Partition)
	}
	if opts.ID != "" {
		set(HeaderID, opts.ID)
	}
	if ms := durationMS(opts.Delay); ms > 0 {
		set(protocol.HeaderDelayMS, strconv.FormatInt(ms, 10))
	}
	if !opts.NotBefore.IsZero() {
		set(protocol.HeaderNotBefore, opts.NotBefore.UTC().Format(time.RFC3339Nano))
	}
	var reply []byte
	if err := c.request(ctx, protocol.VerbPut, queue, rawBody(data), hdr, 0, &reply); err != nil {
		return PushResult{}, err
	}
	res, err := decodePushReply(reply)
	if err != nil {
		return PushResult{}, fmt.Errorf("comb: put %s: %w", queue, err)
	}
	if len(res) != 1 {
		return PushResult{}, fmt.Errorf("comb: put %s: %d results for 1 message", queue, len(res))
	}
	return res[0], nil
}

// Pop leases the next messages of a queue for a consumer group. It returns
// an empty slice, not an error, when nothing became ready within opts.Wait.
// Settle the messages with Ack before their lease expires, or they are
// delivered again.
func (c *Client) Pop(ctx context.Context, queue string, opts PopOptions) ([]Delivery, error) {
	return c.pop(ctx, protocol.VerbPop, queue, opts)
}

// PopNamespace leases the next messages of every queue under namespace
// (the queues whose names start with namespace and a dot: "billing" pops
// "billing.invoices" and "billing.refunds") for a consumer group, spread
// over the queues. opts apply to each queue as to Pop, but
// opts.Partition must be empty. Each Delivery's Queue says which queue it
// came from: Ack and Renew it there. It returns an empty slice, not an
// error, when nothing became ready within opts.Wait, also when no queue
// is under namespace.
func (c *Client) PopNamespace(ctx context.Context, namespace string, opts PopOptions) ([]Delivery, error) {
	return c.pop(ctx, protocol.VerbNamespacePop, namespace, opts)
}

// pop is Pop and PopNamespace: a pop of one queue names no queue in its
// messages, so they get the queue popped.
func (c *Client) pop(ctx context.Context, verb, queue string, opts PopOptions) ([]Delivery, error) {
	var reply []byte
	if err := c.request(ctx, verb, queue, rawBody(appendPopRequest(make([]byte, 0, 128), opts, nil)), nil, opts.Wait, &reply); err != nil {
		return nil, err
	}
	q := queue
	if verb != protocol.VerbPop {
		q = "" // each message names its queue
	}
	out, err := DecodePopReply(reply, q, nil)
	if err != nil {
		return nil, fmt.Errorf("comb: %s %s: %w", verb, queue, err)
	}
	return out, nil
}

// Ack settles leased messages for a group (empty means DefaultGroup) and
// returns one result per ack. An ack the service refuses (expired lease,
// offset outside the lease) is a result with OK false, not an error; an
// unknown status is an ErrBadRequest for the whole request.
func (c *Client) Ack(ctx context.Context, queue, group string, acks []Ack) ([]AckResult, error) {
	if len(acks) == 0 {
		return nil, nil
	}
	var reply []byte
	if err := c.request(ctx, protocol.VerbAck, queue, rawBody(appendAckRequest(make([]byte, 0, 64+96*len(acks)), group, acks)), nil, 0, &reply); err != nil {
		return nil, err
	}
	out, err := DecodeAckReply(reply)
	if err != nil {
		return nil, fmt.Errorf("comb: ack %s: %w", queue, err)
	}
	if len(out) != len(acks) {
		return nil, fmt.Errorf("comb: ack %s: %d results for %d acks", queue, len(out), len(acks))
	}
	return out, nil
}

// AckAndPop settles acks of opts.Group on queue and then pops as Pop does,
// in one request (a pop that carries acks, docs/protocol.md): one round
// trip where Ack and then Pop take two. It returns the deliveries and one
// result per ack, in order. An ack that settles nothing (OK false) does
// not stop the pop; an error means the pop did not reply, and the acks
// may have been settled. Without acks it is Pop.
func (c *Client) AckAndPop(ctx context.Context, queue string, acks []Ack, opts PopOptions) ([]Delivery, []AckResult, error) {
	if len(acks) == 0 {
		out, err := c.Pop(ctx, queue, opts)
		return out, nil, err
	}
	var reply []byte
	body := appendPopRequest(make([]byte, 0, 128+96*len(acks)), opts, acks)
	if err := c.request(ctx, protocol.VerbPop, queue, rawBody(body), nil, opts.Wait, &reply); err != nil {
		return nil, nil, err
	}
	out, res, err := DecodePopAckReply(reply, queue, len(acks), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("comb: pop %s: %w", queue, err)
	}
	return out, res, nil
}

// Txn settles acks and pushes messages, on any queues, in one transaction
// of the service: all of it or nothing. It returns a result per ack (each
// OK) and per push (a result per message), in order, once the transaction
// is durable. An ack under a lease that expired or is another's refuses the
// whole transaction with ErrConflict, and nothing of it is applied; so does
// any other error (ErrNotFound for an ack of a queue that does not exist,
// ErrLimit, ErrTooLarge, ErrUnavailable). A queue pushed to that does not
// exist is created with default settings. Producer ids deduplicate as in
// Push, which makes a consume-transform-produce stage exactly-once: ack the
// input and push its output, with an id derived from the input, together.
func (c *Client) Txn(ctx context.Context, acks []TxnAck, pushes []TxnPush) (TxnResult, error) {
	if len(acks) == 0 && len(pushes) == 0 {
		return TxnResult{}, nil
	}
	var req protocol.TxnRequest
	for _, a := range acks {
		if err := checkQueue(a.Queue); err != nil {
			return TxnResult{}, fmt.Errorf("comb: txn: %w", err)
		}
		req.Acks = append(req.Acks, protocol.TxnAck{Queue: a.Queue, Group: a.Group, Ack: wireAck(a.Ack)})
	}
	for _, ps := range pushes {
		if err := checkQueue(ps.Queue); err != nil {
			return TxnResult{}, fmt.Errorf("comb: txn: %w", err)
		}
		w := protocol.TxnPush{Queue: ps.Queue, Messages: make([]protocol.PushMessage, len(ps.Messages))}
		for i, m := range ps.Messages {
			m.Headers = c.inject(ctx, m.Headers)
			w.Messages[i] = pushMessage(m)
		}
		req.Push = append(req.Push, w)
	}
	var reply []byte
	if err := c.request(ctx, protocol.VerbTxn, "", req, nil, 0, &reply); err != nil {
		return TxnResult{}, err
	}
	out, err := DecodeTxnReply(reply)
	if err != nil {
		return TxnResult{}, fmt.Errorf("comb: txn: %w", err)
	}
	if len(out.Acks) != len(acks) || len(out.Push) != len(pushes) {
		return TxnResult{}, fmt.Errorf("comb: txn: %d ack and %d push results for %d acks and %d pushes", len(out.Acks), len(out.Push), len(acks), len(pushes))
	}
	for i, r := range out.Push {
		if len(r) != len(pushes[i].Messages) {
			return TxnResult{}, fmt.Errorf("comb: txn: push %d: %d results for %d messages", i, len(r), len(pushes[i].Messages))
		}
	}
	return out, nil
}

// Renew extends live leases by lease (0: the queue's lease time) from now,
// and returns one result per lease.
func (c *Client) Renew(ctx context.Context, queue string, leases []string, lease time.Duration) ([]RenewResult, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	var rep protocol.RenewReply
	if err := c.request(ctx, protocol.VerbRenew, queue, protocol.RenewRequest{Leases: leases, LeaseMS: durationMS(lease)}, nil, 0, &rep); err != nil {
		return nil, err
	}
	if len(rep.Results) != len(leases) {
		return nil, fmt.Errorf("comb: renew %s: %d results for %d leases", queue, len(rep.Results), len(leases))
	}
	return rep.Results, nil
}

// Configure creates a queue if needed, merges the non-nil fields of patch
// into its settings and returns the whole configuration. A zero patch reads
// the configuration (creating the queue with defaults).
func (c *Client) Configure(ctx context.Context, queue string, patch ConfigPatch) (Config, error) {
	var cfg Config
	if err := c.request(ctx, protocol.VerbConfigure, queue, patch, nil, 0, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Info returns a queue's settings and live figures with all its
// partitions and groups, or ErrNotFound. It reads every page (see
// InfoPage), one request each, and returns them as one, Next empty.
func (c *Client) Info(ctx context.Context, queue string) (Info, error) {
	all := Info{Partitions: []PartitionInfo{}, Groups: []GroupInfo{}}
	q := PageQuery{Limit: protocol.MaxInfoLimit}
	for {
		page, err := c.InfoPage(ctx, queue, q)
		if err != nil {
			return Info{}, err
		}
		parts, groups := all.Partitions, all.Groups
		all = page
		all.Partitions, all.Groups = append(parts, page.Partitions...), append(groups, page.Groups...)
		if page.Next == "" {
			return all, nil
		}
		q.After = page.Next
	}
}

// InfoPage returns one page of a queue's info: its settings and figures
// (of the whole queue) with up to q.Limit partitions and q.Limit groups,
// and in Next the cursor of the following page ("" after the last).
func (c *Client) InfoPage(ctx context.Context, queue string, q PageQuery) (Info, error) {
	var info Info
	req := protocol.InfoRequest{Limit: optInt(q.Limit), After: q.After}
	if err := c.request(ctx, protocol.VerbInfo, queue, req, nil, 0, &info); err != nil {
		return Info{}, err
	}
	return info, nil
}

// List returns a summary line of every queue, ordered by name. It reads
// every page (see ListPage), one request each.
func (c *Client) List(ctx context.Context) ([]QueueSummary, error) {
	all := []QueueSummary{}
	q := PageQuery{Limit: protocol.MaxListLimit}
	for {
		queues, next, err := c.ListPage(ctx, q)
		if err != nil {
			return nil, err
		}
		all = append(all, queues...)
		if next == "" {
			return all, nil
		}
		q.After = next
	}
}

// ListPage returns up to q.Limit queues, ordered by name, after q.After,
// and the cursor of the following page ("" after the last).
func (c *Client) ListPage(ctx context.Context, q PageQuery) ([]QueueSummary, string, error) {
	var rep protocol.ListReply
	req := protocol.ListRequest{Limit: optInt(q.Limit), After: q.After}
	if err := c.request(ctx, protocol.VerbList, "", req, nil, 0, &rep); err != nil {
		return nil, "", err
	}
	return rep.Queues, rep.Next, nil
}

// Delete removes a queue and all its data, or returns ErrNotFound.
func (c *Client) Delete(ctx context.Context, queue string) error {
	return c.request(ctx, protocol.VerbDelete, queue, nil, nil, 0, nil)
}

// DeadLetters returns a page of a queue's dead letters, oldest first, and
// the cursor of the next page ("" after the last page).
func (c *Client) DeadLetters(ctx context.Context, queue string, q DeadLetterQuery) ([]DeadLetter, string, error) {
	var rep protocol.DLQReply
	req := protocol.DLQRequest{Group: q.Group, Limit: optInt(q.Limit), After: q.After}
	if err := c.request(ctx, protocol.VerbDLQ, queue, req, nil, 0, &rep); err != nil {
		return nil, "", err
	}
	out := make([]DeadLetter, len(rep.DeadLetters))
	for i, d := range rep.DeadLetters {
		dl, err := deadLetter(d)
		if err != nil {
			return nil, "", fmt.Errorf("comb: dlq %s: dead letter %s: %w", queue, d.DLQID, err)
		}
		out[i] = dl
	}
	return out, rep.Next, nil
}

// Replay pushes the chosen dead letters again into their partitions as new
// messages, which every group sees, removes them from the dead-letter list
// and returns how many it replayed.
func (c *Client) Replay(ctx context.Context, queue string, dlqIDs []string) (int, error) {
	if len(dlqIDs) == 0 {
		return 0, nil
	}
	var rep protocol.DoneReply
	if err := c.request(ctx, protocol.VerbDLQ, queue, protocol.DLQRequest{Replay: dlqIDs}, nil, 0, &rep); err != nil {
		return 0, err
	}
	return rep.Done, nil
}

// Purge removes the chosen dead letters without replaying them and returns
// how many it removed.
func (c *Client) Purge(ctx context.Context, queue string, dlqIDs []string) (int, error) {
	if len(dlqIDs) == 0 {
		return 0, nil
	}
	var rep protocol.DoneReply
	if err := c.request(ctx, protocol.VerbDLQ, queue, protocol.DLQRequest{Purge: dlqIDs}, nil, 0, &rep); err != nil {
		return 0, err
	}
	return rep.Done, nil
}

// rawBody marks a request body that is sent as is, not encoded as JSON.
type rawBody []byte

// request sends one request on protocol.Subject(prefix, verb, queue) and
// decodes the reply into out with encoding/json, unless out is nil or a
// *[]byte, which gets the reply's body. extra lengthens the
// timeout by a pop's long-poll time.
func (c *Client) request(ctx context.Context, verb, queue string, body any, hdr nats.Header, extra time.Duration, out any) error {
	// op names the request in errors, built only for one.
	op := func() string {
		if protocol.TakesQueue(verb) {
			return verb + " " + queue
		}
		return verb
	}
	if protocol.TakesQueue(verb) {
		if err := checkQueue(queue); err != nil {
			return fmt.Errorf("comb: %s: %w", op(), err)
		}
	}
	subject := protocol.Subject(c.prefix, verb, queue)

	msg := nats.NewMsg(subject)
	msg.Header = hdr
	data, err := encodeBody(body)
	if err != nil {
		return fmt.Errorf("comb: %s: encode request: %w", op(), err)
	}
	msg.Data = data

	timeout := c.timeout + extra
	var reply *nats.Msg
	if ctx.Done() == nil {
		// A context that never ends (context.Background()): nats' own
		// timer, without a context of our own, which costs four
		// allocations a request.
		reply, err = c.nc.RequestMsg(msg, timeout)
	} else {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		reply, err = c.nc.RequestMsgWithContext(rctx, msg)
		cancel()
	}
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return fmt.Errorf("comb: %s: no Comb service listens on %s: %w", op(), subject, err)
		case errors.Is(err, nats.ErrTimeout):
			return fmt.Errorf("comb: %s: no reply within %s: %w", op(), timeout, err)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// Our own timeout, not the caller's: say so in nats' terms.
			return fmt.Errorf("comb: %s: no reply within %s: %w", op(), timeout, nats.ErrTimeout)
		default:
			return fmt.Errorf("comb: %s: %w", op(), err)
		}
	}
	if code := reply.Header.Get(protocol.HeaderErrorCode); code != "" {
		return fmt.Errorf("comb: %s: %w", op(), replyError(code, reply))
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		// The verb decodes it (wire.go).
		*o = reply.Data
		return nil
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("comb: %s: decode reply: %w", op(), err)
	}
	return nil
}

// encodeBody returns a request's body: b itself for a rawBody, {} for nil,
// else b encoded by encoding/json.
func encodeBody(b any) ([]byte, error) {
	switch b := b.(type) {
	case rawBody:
		return b, nil
	case nil:
		return []byte("{}"), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Message data embedded as JSON must stay byte for byte.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ReplyError returns the error a reply carries (its Comb-Error-Code
// header, docs/protocol.md) as an *Error, or nil when the reply is not an
// error, for a program that sends its own requests: check it before
// decoding a reply's body with DecodePopReply and its kin.
func ReplyError(reply *nats.Msg) error {
	code := reply.Header.Get(protocol.HeaderErrorCode)
	if code == "" {
		return nil
	}
	return replyError(code, reply)
}

// replyError builds the *Error of an error reply. The body's message is
// preferred to the header's: headers are single-line, the body need not be.
func replyError(code string, reply *nats.Msg) *Error {
	e := &Error{Message: reply.Header.Get(protocol.HeaderError)}
	n, err := strconv.Atoi(code)
	if err != nil {
		e.Code = protocol.CodeInternal
		e.Message = "malformed error code " + strconv.Quote(code) + ": " + e.Message
		return e
	}
	e.Code = n
	var body protocol.ErrorReply
	if len(reply.Data) > 0 && json.Unmarshal(reply.Data, &body) == nil && body.Error.Message != "" {
		e.Message = body.Error.Message
	}
	if ms, err := strconv.ParseInt(reply.Header.Get(protocol.HeaderRetryAfterMS), 10, 64); err == nil && ms > 0 {
		e.RetryAfterMS = ms
	}
	if e.Message == "" {
		e.Message = "error " + code
	}
	return e
}

// checkQueue refuses names that cannot form a subject, so that they fail
// like any other bad name (ErrBadRequest) rather than with a NATS protocol
// error. The service checks the finer rules (protocol.ValidateQueue); the
// client leaves them to it, so that a name the service accepts is never
// refused by an older client.
func checkQueue(queue string) error {
	if queue == "" {
		return protocol.BadRequest("empty queue name")
	}
	if strings.ContainsAny(queue, " \t\r\n*>") || strings.HasPrefix(queue, ".") ||
		strings.HasSuffix(queue, ".") || strings.Contains(queue, "..") {
		return protocol.BadRequest("bad queue name %q", queue)
	}
	return nil
}
