package comb

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/combmq/comb/protocol"
)

// DefaultPartition is the partition of a message pushed without one.
const DefaultPartition = protocol.DefaultPartition

// DefaultGroup is the consumer group of a pop or ack that names none.
const DefaultGroup = protocol.DefaultGroup

// Push statuses, in PushResult.Status; see the protocol package.
const (
	// StatusStored: the message is durable in PostgreSQL at Offset.
	StatusStored = protocol.StatusStored
	// StatusDuplicate: a message with the same ID was already stored in the
	// partition within the queue's dedup window; Offset is the original's.
	StatusDuplicate = protocol.StatusDuplicate
	// StatusSpooled: PostgreSQL was unreachable (or the broker is in
	// maintenance mode) and the message is fsynced in the broker's disk
	// spool, without an offset yet; the broker stores it, in order, when
	// PostgreSQL is back. Do not push it again.
	StatusSpooled = protocol.StatusSpooled
)

// Ack statuses, in Ack.Status; see the protocol package.
const (
	// AckCompleted settles the message and every earlier one of its lease.
	AckCompleted = protocol.AckCompleted
	// AckRetry settles the earlier messages of the lease and makes this one
	// and the rest of the lease deliverable again at once, without spending
	// an attempt.
	AckRetry = protocol.AckRetry
	// AckFailed is like AckRetry but spends an attempt: when the queue's
	// max_attempts are spent the message is dead-lettered.
	AckFailed = protocol.AckFailed
	// AckDead dead-letters the message at once.
	AckDead = protocol.AckDead
)

// Values of PopOptions.From; FromTime makes the third kind.
const (
	// FromAll starts a new group at the oldest retained message.
	FromAll = protocol.FromAll
	// FromNew starts a new group at the next message pushed.
	FromNew = protocol.FromNew
)

// FromTime returns a PopOptions.From that starts a new group at the first
// message created at or after t.
func FromTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Message is one message to push.
type Message struct {
	// Partition orders messages: order is kept within a partition only.
	// Empty means DefaultPartition.
	Partition string
	// ID is an optional producer id. A second message with the same ID in
	// the same partition within the queue's dedup window is not stored again.
	ID string
	// Data is the message, any bytes.
	Data []byte
	// Headers travel with the message to its consumers; names starting
	// with "Comb-" are reserved. They count toward the message's size.
	// Push adds the trace context of its ctx (see WithPropagator).
	Headers nats.Header
	// Delay holds the message back this long after it is stored, and
	// NotBefore until a time (at most one of them). The partition's later
	// messages wait behind it, so its order is kept.
	Delay     time.Duration
	NotBefore time.Time
}

// PushResult is the outcome of one pushed message: the wire form.
type PushResult = protocol.PushResult

// PutOptions are the options of Client.Put, sent as the headers
// Comb-Partition, Comb-Id, Comb-Delay-Ms and Comb-Not-Before, and the
// message's own headers.
type PutOptions struct {
	Partition string
	ID        string
	// Headers are the message's headers, as Message.Headers.
	Headers nats.Header
	// Delay and NotBefore hold the message back, as in Message.
	Delay     time.Duration
	NotBefore time.Time
}

// PopOptions are the options of Client.Pop; the zero value pops up to
// protocol.DefaultPopMax messages of one partition for the default group,
// without waiting.
type PopOptions struct {
	// Group is the consumer group; empty means DefaultGroup.
	Group string
	// Partition restricts the pop to one partition; empty means any
	// partition with messages ready (the service spreads pops fairly).
	Partition string
	// Max is the most messages returned; 0 means the service's default
	// (protocol.DefaultPopMax).
	Max int
	// Partitions is the most partitions one pop leases; 0 means the
	// service's default (protocol.DefaultPopPartitions, 1).
	Partitions int
	// Wait long-polls this long when nothing is ready. It is sent in whole
	// milliseconds, and the request's timeout is extended by it.
	Wait time.Duration
	// Lease overrides the queue's lease time.
	Lease time.Duration
	// AutoAck settles messages on delivery (at most once).
	AutoAck bool
	// From says where a group that has never read a partition starts:
	// FromAll (default), FromNew or FromTime(t).
	From string
}

// Delivery is one delivered message, its bytes decoded from the data or
// data_b64 of its wire form, protocol.Delivery.
type Delivery struct {
	// Queue is the queue the message is in, which Ack and Renew take:
	// the queue popped, or for PopNamespace the queue under the namespace
	// that the message came from. Peek leaves it empty.
	Queue     string
	Partition string
	Offset    int64
	ID        string
	// Lease names the lease the message is held under; empty with AutoAck.
	Lease string
	// Attempt counts deliveries of this message to the group, from 1.
	Attempt   int
	CreatedAt time.Time
	Data      []byte
	// Headers are the message's headers, nil when it has none. The trace
	// context of its producer is there; TraceContext reads it.
	Headers nats.Header
}

// Ack settles a leased message and, cumulatively, every earlier message of
// the same lease. It is protocol.Ack with a plain Offset, which the wire
// form makes a pointer only so that a missing offset can be told from 0.
type Ack struct {
	Partition string
	Offset    int64
	Lease     string
	// Status is one of AckCompleted (the default when empty), AckRetry,
	// AckFailed or AckDead.
	Status string
	// Delay, with AckRetry or AckFailed only, holds the message (and its
	// partition, for the group) back this long, in whole milliseconds,
	// before it is delivered again, in place of the queue's retry delay;
	// Duration(0) redelivers at once. nil: the queue's retry delay for
	// AckFailed, at once for AckRetry. Brokers older than this field
	// refuse an ack that sets it.
	Delay *time.Duration
	// Error, with AckFailed or AckDead only, says why, in at most
	// protocol.MaxAckErrorBytes of printable UTF-8 (no control characters,
	// no newlines): a dead letter the ack makes keeps it (DeadLetter.Error).
	// Empty sends nothing.
	Error string
}

// Duration returns a pointer to d, for Ack.Delay.
func Duration(d time.Duration) *time.Duration { return &d }

// AckResult is the outcome of one Ack. An ack under a wrong or expired lease,
// or for an offset outside its lease, settles nothing: OK is false and Error
// says why. It has the fields of protocol.AckResult; it is a type of its own
// for its Err method, whose text names this client.
type AckResult struct {
	OK    bool
	Error string
}

// Err returns nil for an accepted ack, else an error with the service's
// reason.
func (r AckResult) Err() error {
	if r.OK {
		return nil
	}
	if r.Error == "" {
		return fmt.Errorf("comb: ack refused")
	}
	return fmt.Errorf("comb: ack refused: %s", r.Error)
}

// TxnAck is one ack of a transaction: an Ack of a group (empty means
// DefaultGroup) on a queue.
type TxnAck struct {
	Queue string
	Group string
	Ack
}

// TxnPush is one push of a transaction: messages for one queue.
type TxnPush struct {
	Queue    string
	Messages []Message
}

// TxnResult is the outcome of a committed transaction: a result per ack
// and, per push, a result per message, in request order.
type TxnResult struct {
	Acks []AckResult
	Push [][]PushResult
}

// RenewResult is the outcome of renewing one lease: the wire form.
type RenewResult = protocol.RenewResult

// Config is a queue's settings: the wire form, whose field names and units
// follow docs/protocol.md.
type Config = protocol.QueueConfig

// ConfigPatch is a partial queue configuration for Client.Configure: nil
// fields keep their current value (a new queue's default). Int64 and Bool
// make the pointers.
type ConfigPatch = protocol.ConfigPatch

// Int64 returns a pointer to v, for ConfigPatch.
func Int64(v int64) *int64 { return &v }

// Bool returns a pointer to v, for ConfigPatch.
func Bool(v bool) *bool { return &v }

// Info is a queue's settings and live figures: the wire form.
type Info = protocol.Info

// PartitionInfo is one partition's figures: the wire form.
type PartitionInfo = protocol.PartitionInfo

// GroupInfo is one consumer group's state over a queue: the wire form.
type GroupInfo = protocol.GroupInfo

// QueueSummary is one line of Client.List: the wire form.
type QueueSummary = protocol.QueueSummary

// PageQuery selects a page of Client.InfoPage or Client.ListPage; the
// zero value is the first page of the service's default size
// (protocol.DefaultInfoLimit, protocol.DefaultListLimit).
type PageQuery struct {
	Limit int    // 0 means the service's default
	After string // the Next of the previous page
}

// DeadLetterQuery selects a page of dead letters; the zero value is the
// first page of up to protocol.DefaultDLQLimit of every group.
type DeadLetterQuery struct {
	Group string // empty means every group
	Limit int    // 0 means the service's default (protocol.DefaultDLQLimit)
	After string // the cursor returned with the previous page
}

// DeadLetter is a message a group gave up on, its bytes decoded from the
// data or data_b64 of its wire form, protocol.DeadLetter.
type DeadLetter struct {
	DLQID     string
	Group     string
	Partition string
	Offset    int64
	ID        string
	Attempts  int
	Reason    string // the ack status or cause that dead-lettered it
	Error     string // the error text of the ack that dead-lettered it, if it gave one
	DeadAt    time.Time
	Data      []byte
	Headers   nats.Header // the message's, nil when it had none
}

// The conversions between the client's types and the wire shapes of the
// protocol package. The request and reply bodies themselves are protocol
// types, encoded and decoded by encoding/json.

// pushMessage is the wire form of m.
func pushMessage(m Message) protocol.PushMessage {
	w := protocol.PushMessage{Partition: m.Partition, ID: m.ID, Headers: wireHeaders(m.Headers), DelayMS: durationMS(m.Delay)}
	if !m.NotBefore.IsZero() {
		w.NotBefore = m.NotBefore.UTC().Format(time.RFC3339Nano)
	}
	w.Data, w.DataB64 = encodeData(m.Data)
	return w
}

// wireHeaders and natsHeaders convert headers between the client's form
// and the wire's.
func wireHeaders(h nats.Header) protocol.Headers {
	if len(h) == 0 {
		return nil
	}
	w := make(protocol.Headers, len(h))
	for k, v := range h {
		w[k] = protocol.HeaderValues(v)
	}
	return w
}

func natsHeaders(w protocol.Headers) nats.Header {
	if len(w) == 0 {
		return nil
	}
	h := make(nats.Header, len(w))
	for k, v := range w {
		h[k] = []string(v)
	}
	return h
}

// encodeData sets the data field of a wire message: "data" when the
// bytes are compact JSON (isCompactJSON), which encoding/json marshals
// byte for byte, else "data_b64". JSON with inner spaces would arrive
// changed as "data": encoding/json re-compacts a RawMessage as it
// marshals it.
func encodeData(b []byte) (json.RawMessage, *string) {
	if isCompactJSON(b) {
		return json.RawMessage(b), nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

// decodeData returns the message bytes of a reply's data or data_b64 field.
func decodeData(raw json.RawMessage, b64 *string) ([]byte, error) {
	if b64 != nil {
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, fmt.Errorf("data_b64: %w", err)
		}
		return b, nil
	}
	// Unmarshal already copied raw out of the reply buffer.
	return []byte(raw), nil
}

// delivery is the client's form of a delivered message.
func delivery(m protocol.Delivery) (Delivery, error) {
	data, err := decodeData(m.Data, m.DataB64)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{
		Queue:     m.Queue,
		Partition: m.Partition,
		Offset:    m.Offset,
		ID:        m.ID,
		Lease:     m.Lease,
		Attempt:   m.Attempt,
		CreatedAt: m.CreatedAt,
		Data:      data,
		Headers:   natsHeaders(m.Headers),
	}, nil
}

// deadLetter is the client's form of a dead letter.
func deadLetter(d protocol.DeadLetter) (DeadLetter, error) {
	data, err := decodeData(d.Data, d.DataB64)
	if err != nil {
		return DeadLetter{}, err
	}
	return DeadLetter{
		DLQID:     d.DLQID,
		Group:     d.Group,
		Partition: d.Partition,
		Offset:    d.Offset,
		ID:        d.ID,
		Attempts:  d.Attempts,
		Reason:    d.Reason,
		Error:     d.Error,
		DeadAt:    d.DeadAt,
		Data:      data,
		Headers:   natsHeaders(d.Headers),
	}, nil
}

// wireAck is the wire form of a.
func wireAck(a Ack) protocol.Ack {
	w := protocol.Ack{Partition: a.Partition, Offset: &a.Offset, Lease: a.Lease, Status: a.Status, Error: a.Error}
	if a.Delay != nil {
		ms := a.Delay.Milliseconds()
		w.DelayMS = &ms
	}
	return w
}

// optInt is a count option on the wire: nil (left out, the service's
// default) for 0, which the options' zero values mean.
func optInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func durationMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := d.Milliseconds()
	if ms == 0 {
		// A sub-millisecond value must not turn into "use the default".
		ms = 1
	}
	return ms
}
