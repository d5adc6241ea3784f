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
)

// Header names of a put request.
const (
	HeaderPartition = "Comb-Partition"
	HeaderID        = "Comb-Id"
)

// Header names of an error reply, set by the NATS micro framework.
const (
	headerError     = "Nats-Service-Error"
	headerErrorCode = "Nats-Service-Error-Code"
)

// DefaultPrefix is the first subject token of every request.
const DefaultPrefix = "comb"

// DefaultTimeout is how long a request waits for its reply, on top of a
// pop's long-poll time.
const DefaultTimeout = 10 * time.Second

// Client sends Comb requests over a NATS connection. It is safe for
// concurrent use; it does not own the connection.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
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
	req := pushRequest{Messages: make([]wireMessage, len(msgs))}
	for i, m := range msgs {
		w := wireMessage{Partition: m.Partition, ID: m.ID}
		w.Data, w.DataB64 = encodeData(m.Data)
		req.Messages[i] = w
	}
	var rep pushReply
	if err := c.request(ctx, "push", queue, req, nil, 0, &rep); err != nil {
		return nil, err
	}
	if len(rep.Results) != len(msgs) {
		return nil, fmt.Errorf("comb: push %s: %d results for %d messages", queue, len(rep.Results), len(msgs))
	}
	return rep.Results, nil
}

// Put appends one message. Its bytes travel as the request body unchanged,
// and the options as headers; this is the verb to use from the nats CLI.
func (c *Client) Put(ctx context.Context, queue string, data []byte, opts PutOptions) (PushResult, error) {
	var hdr nats.Header
	if opts.Partition != "" || opts.ID != "" {
		hdr = nats.Header{}
		if opts.Partition != "" {
			hdr.Set(HeaderPartition, opts.Partition)
		}
		if opts.ID != "" {
			hdr.Set(HeaderID, opts.ID)
		}
	}
	var rep pushReply
	if err := c.request(ctx, "put", queue, rawBody(data), hdr, 0, &rep); err != nil {
		return PushResult{}, err
	}
	if len(rep.Results) != 1 {
		return PushResult{}, fmt.Errorf("comb: put %s: %d results for 1 message", queue, len(rep.Results))
	}
	return rep.Results[0], nil
}

// Pop leases the next messages of a queue for a consumer group. It returns
// an empty slice, not an error, when nothing became ready within opts.Wait.
// Settle the messages with Ack before their lease expires, or they are
// delivered again.
func (c *Client) Pop(ctx context.Context, queue string, opts PopOptions) ([]Delivery, error) {
	req := popRequest{
		Group:      opts.Group,
		Partition:  opts.Partition,
		Max:        opts.Max,
		Partitions: opts.Partitions,
		WaitMS:     durationMS(opts.Wait),
		LeaseMS:    durationMS(opts.Lease),
		AutoAck:    opts.AutoAck,
		From:       opts.From,
	}
	var rep popReply
	if err := c.request(ctx, "pop", queue, req, nil, opts.Wait, &rep); err != nil {
		return nil, err
	}
	out := make([]Delivery, len(rep.Messages))
	for i, m := range rep.Messages {
		data, err := decodeData(m.Data, m.DataB64)
		if err != nil {
			return nil, fmt.Errorf("comb: pop %s: message %s/%d: %w", queue, m.Partition, m.Offset, err)
		}
		out[i] = Delivery{
			Partition: m.Partition,
			Offset:    m.Offset,
			ID:        m.ID,
			Lease:     m.Lease,
			Attempt:   m.Attempt,
			CreatedAt: m.CreatedAt,
			Data:      data,
		}
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
	var rep ackReply
	if err := c.request(ctx, "ack", queue, ackRequest{Group: group, Acks: acks}, nil, 0, &rep); err != nil {
		return nil, err
	}
	if len(rep.Results) != len(acks) {
		return nil, fmt.Errorf("comb: ack %s: %d results for %d acks", queue, len(rep.Results), len(acks))
	}
	return rep.Results, nil
}

// Renew extends live leases by lease (0: the queue's lease time) from now,
// and returns one result per lease.
func (c *Client) Renew(ctx context.Context, queue string, leases []string, lease time.Duration) ([]RenewResult, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	var rep renewReply
	if err := c.request(ctx, "renew", queue, renewRequest{Leases: leases, LeaseMS: durationMS(lease)}, nil, 0, &rep); err != nil {
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
	if err := c.request(ctx, "configure", queue, patch, nil, 0, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Info returns a queue's settings and live figures, or ErrNotFound.
func (c *Client) Info(ctx context.Context, queue string) (Info, error) {
	var info Info
	if err := c.request(ctx, "info", queue, nil, nil, 0, &info); err != nil {
		return Info{}, err
	}
	return info, nil
}

// List returns a summary line of every queue, ordered by name.
func (c *Client) List(ctx context.Context) ([]QueueSummary, error) {
	var rep listReply
	if err := c.request(ctx, "list", "", nil, nil, 0, &rep); err != nil {
		return nil, err
	}
	return rep.Queues, nil
}

// Delete removes a queue and all its data, or returns ErrNotFound.
func (c *Client) Delete(ctx context.Context, queue string) error {
	return c.request(ctx, "delete", queue, nil, nil, 0, nil)
}

// DeadLetters returns a page of a queue's dead letters, oldest first, and
// the cursor of the next page ("" after the last page).
func (c *Client) DeadLetters(ctx context.Context, queue string, q DeadLetterQuery) ([]DeadLetter, string, error) {
	var rep dlqReply
	if err := c.request(ctx, "dlq", queue, dlqRequest{Group: q.Group, Limit: q.Limit, After: q.After}, nil, 0, &rep); err != nil {
		return nil, "", err
	}
	out := make([]DeadLetter, len(rep.DeadLetters))
	for i, d := range rep.DeadLetters {
		data, err := decodeData(d.Data, d.DataB64)
		if err != nil {
			return nil, "", fmt.Errorf("comb: dlq %s: dead letter %s: %w", queue, d.DLQID, err)
		}
		out[i] = DeadLetter{
			DLQID:     d.DLQID,
			Group:     d.Group,
			Partition: d.Partition,
			Offset:    d.Offset,
			ID:        d.ID,
			Attempts:  d.Attempts,
			Reason:    d.Reason,
			DeadAt:    d.DeadAt,
			Data:      data,
		}
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
	var rep dlqReply
	if err := c.request(ctx, "dlq", queue, dlqRequest{Replay: dlqIDs}, nil, 0, &rep); err != nil {
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
	var rep dlqReply
	if err := c.request(ctx, "dlq", queue, dlqRequest{Purge: dlqIDs}, nil, 0, &rep); err != nil {
		return 0, err
	}
	return rep.Done, nil
}

// rawBody marks a request body that is sent as is, not encoded as JSON.
type rawBody []byte

// request sends one request on <prefix>.<verb>[.<queue>] and decodes the
// reply into out (unless out is nil). extra lengthens the timeout by a
// pop's long-poll time.
func (c *Client) request(ctx context.Context, verb, queue string, body any, hdr nats.Header, extra time.Duration, out any) error {
	op := verb
	subject := c.prefix + "." + verb
	if verb != "list" {
		op = verb + " " + queue
		if err := checkQueue(queue); err != nil {
			return fmt.Errorf("comb: %s: %w", op, err)
		}
		subject += "." + queue
	}

	msg := nats.NewMsg(subject)
	msg.Header = hdr
	switch b := body.(type) {
	case rawBody:
		msg.Data = b
	case nil:
		msg.Data = []byte("{}")
	default:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		// Message data embedded as JSON must stay byte for byte.
		enc.SetEscapeHTML(false)
		if err := enc.Encode(b); err != nil {
			return fmt.Errorf("comb: %s: encode request: %w", op, err)
		}
		msg.Data = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}

	timeout := c.timeout + extra
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := c.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return fmt.Errorf("comb: %s: no Comb service listens on %s: %w", op, subject, err)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// Our own timeout, not the caller's: say so in nats' terms.
			return fmt.Errorf("comb: %s: no reply within %s: %w", op, timeout, nats.ErrTimeout)
		default:
			return fmt.Errorf("comb: %s: %w", op, err)
		}
	}
	if code := reply.Header.Get(headerErrorCode); code != "" {
		return fmt.Errorf("comb: %s: %w", op, replyError(code, reply))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("comb: %s: decode reply: %w", op, err)
	}
	return nil
}

// replyError builds the *Error of an error reply. The body's message is
// preferred to the header's: headers are single-line, the body need not be.
func replyError(code string, reply *nats.Msg) *Error {
	e := &Error{Message: reply.Header.Get(headerError)}
	n, err := strconv.Atoi(code)
	if err != nil {
		e.Code = 500
		e.Message = "malformed error code " + strconv.Quote(code) + ": " + e.Message
		return e
	}
	e.Code = n
	var body errorReply
	if len(reply.Data) > 0 && json.Unmarshal(reply.Data, &body) == nil && body.Error.Message != "" {
		e.Message = body.Error.Message
	}
	if e.Message == "" {
		e.Message = "error " + code
	}
	return e
}

// checkQueue refuses names that cannot form a subject, so that they fail
// like any other bad name (ErrBadRequest) rather than with a NATS protocol
// error; the service checks the finer rules.
func checkQueue(queue string) error {
	if queue == "" {
		return &Error{Code: 400, Message: "empty queue name"}
	}
	if strings.ContainsAny(queue, " \t\r\n*>") || strings.HasPrefix(queue, ".") ||
		strings.HasSuffix(queue, ".") || strings.Contains(queue, "..") {
		return &Error{Code: 400, Message: "bad queue name " + strconv.Quote(queue)}
	}
	return nil
}
