// Package domain is what Comb's queues, messages, pops and acks are, apart
// from their JSON form (package protocol) and their PostgreSQL form
// (package store): queue settings with their one validation, the requests
// the bridge hands the store, and the outcomes the store returns.
//
// Requests are read-only inputs: the store never writes into them, and
// returns its results instead (River's X(ctx, params) (results, error)).
// The decoders of package wire fill every default, so a request reaches the
// store with its names and numbers already checked.
package domain

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/combmq/comb/protocol"
)

// Sentinel errors callers branch on. The bridge maps them to wire codes:
// ErrInvalid 400, ErrNotFound 404, ErrConflict 409, ErrTooLarge 413,
// ErrLimit 429, ErrUnavailable 503.
var (
	ErrInvalid     = errors.New("invalid request")
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrTooLarge    = errors.New("too large")
	ErrLimit       = errors.New("limit reached")
	ErrUnavailable = errors.New("postgresql unavailable")
	// ErrOutcomeUnknown comes with ErrUnavailable when the connection
	// broke after the request was sent: PostgreSQL may have committed
	// it. A push so answered must not be spooled (it could be stored
	// twice); it is answered 503, which the protocol says may mean stored.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

// RetryAfter returns err with a hint of when trying again may succeed, for
// the error reply of a limit (429); errors.Unwrap gives err back.
func RetryAfter(err error, after time.Duration) error {
	return &retryAfterError{err: err, after: after}
}

// RetryAfterOf is the hint RetryAfter put in err's chain, if any.
func RetryAfterOf(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after, true
	}
	return 0, false
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// Invalidf returns an error that matches ErrInvalid and says only the
// formatted message, for the client to read as it is ("lease_ms: 50 is out
// of range 100..86400000").
func Invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Conflictf returns an error that matches ErrConflict and says only the
// formatted message ("acks[0]: lease expired or not held by this group").
func Conflictf(format string, args ...any) error {
	return &conflictError{fmt.Sprintf(format, args...)}
}

type conflictError struct{ msg string }

func (e *conflictError) Error() string        { return e.msg }
func (e *conflictError) Is(target error) bool { return target == ErrConflict }

// Encoding says whether a message's bytes are JSON that a reply may carry
// as is ("data"), or bytes that travel as base64 ("data_b64"). It is known
// when the message is pushed and stored with it, so a pop encodes its
// reply without looking at the bytes again.
type Encoding uint8

const (
	// EncodingUnknown: stored before encodings were recorded; a reply must
	// check the bytes.
	EncodingUnknown Encoding = iota
	// EncodingJSON: one JSON value, valid UTF-8, no space around it.
	EncodingJSON
	// EncodingBinary: anything else.
	EncodingBinary
)

// QueueRef names a queue: its tenant and its name within the tenant. Two
// tenants' queues of one name are different queues. The tenant is the NATS
// account a request arrived in, never anything the client wrote; "" is the
// global tenant of a configuration without accounts.
type QueueRef struct {
	Tenant string
	Name   string
}

// Global returns the global tenant's queue called name.
func Global(name string) QueueRef { return QueueRef{Name: name} }

// String is the queue for logs: its name, after its tenant and a slash when
// it has one.
func (r QueueRef) String() string {
	if r.Tenant == "" {
		return r.Name
	}
	return r.Tenant + "/" + r.Name
}

// PushMessage is one message to append.
type PushMessage struct {
	Partition string // never empty: the decoder fills the default
	ID        string // optional producer id, for deduplication
	Data      []byte
	Encoding  Encoding
	// Headers are the message's headers in their canonical form (see
	// Headers), nil when it has none. They count toward its size.
	Headers Headers
	// DelayMS and NotBefore hold the message back: it becomes deliverable
	// DelayMS after it is stored, and not before NotBefore (zero: no
	// bound). The partition's later messages wait behind it.
	DelayMS   int64
	NotBefore time.Time
}

// Delayed reports whether m is held back after it is stored.
func (m *PushMessage) Delayed() bool { return m.DelayMS > 0 || !m.NotBefore.IsZero() }

// Size is what m counts toward the message limits: its data and headers.
func (m *PushMessage) Size() int { return len(m.Data) + len(m.Headers) }

// Headers are a message's headers as they are stored and sent in replies:
// the JSON object {"Name":["value",…],…}, names in byte order, each value
// an array of strings. The decoders build it from a push's "headers" or a
// put's NATS headers; nothing else writes it, so it is always valid JSON.
type Headers []byte

// PushParams is one client's push: messages for one queue. A queue that
// does not exist is created with DefaultQueueConfig.
type PushParams struct {
	Queue    QueueRef
	Messages []PushMessage
}

// PushStatus is what became of a pushed message.
type PushStatus uint8

const (
	// Stored: durable in PostgreSQL at its offset.
	Stored PushStatus = iota + 1
	// Duplicate: a message with the same producer id is stored already;
	// the offset is the original's.
	Duplicate
	// Spooled: PostgreSQL was unreachable (or the bridge in maintenance);
	// the message is durable in the bridge's local spool and will be
	// stored in order when PostgreSQL is back. It has no offset yet.
	Spooled
)

// PushResult is the outcome of one pushed message.
type PushResult struct {
	Partition string
	Offset    int64
	Status    PushStatus
}

// PushOutcome is the outcome of one PushParams: a result per message, in
// order, or the error that refused the whole request (a limit, a message
// too large, the transaction failing).
type PushOutcome struct {
	Results []PushResult
	Err     error
}

// StartKind says where a cursor starts.
type StartKind uint8

const (
	// StartAll: the oldest retained message.
	StartAll StartKind = iota
	// StartNew: past the newest message.
	StartNew
	// StartTime: the first message pushed at or after a time.
	StartTime
)

// Start says where a group that has never read a partition starts (a
// pop's from), or where a seek moves a group (its to).
type Start struct {
	Kind StartKind
	Time time.Time // with StartTime
}

// PopParams asks for the next messages of a queue for a consumer group.
type PopParams struct {
	Queue     QueueRef
	Group     string // never empty: the decoder fills the default
	Partition string // empty means any partition with messages ready
	// Candidates, with Partition empty, are the only partitions the pop
	// may lease: the store finds their cursors by key instead of reading
	// every cursor of the group. The bridge sets them when it knows that
	// no other partition can be ready. Clients cannot: the wire has no
	// such field.
	Candidates []string
	Max        int   // most messages returned, at least 1
	Partitions int   // most partitions leased, at least 1
	LeaseMS    int64 // 0 means the queue's lease_ms
	AutoAck    bool
	From       Start
	// MaxBytes bounds the reply: when the leased messages' SizeOf adds up
	// to more, the pop returns the prefix that fits (at least one message)
	// and shrinks its leases to what it returns, so nothing stays leased
	// unseen: an auto-ack pop in the same transaction, a leased pop in the
	// next (see Store.Pop). 0 means no bound.
	MaxBytes int
	// StrictMaxBytes makes MaxBytes bound the first message too: a pop
	// whose first message does not fit returns nothing and leases
	// nothing. A namespace pop sets it for every queue after the first,
	// whose messages share one reply.
	StrictMaxBytes bool
	// SizeOf is a message's size in the reply; nil counts data, id and
	// partition bytes plus 64.
	SizeOf func(*Message) int
}

// Offer is a waiting pop offered the messages a push stores in one of its
// partitions (Store.PushOffer): the push leases them to it in its own
// transaction when the pop's group has nothing else to deliver there, so
// the pop is answered without a statement of its own. Pop's Partition, if
// set, is Partition; its Candidates and From do not apply.
type Offer struct {
	Pop       PopParams
	Partition string
}

// Handed is what a push leased to an Offer: nothing when the offer was
// not taken (its group had other messages to deliver there first, or a
// lease). AllGroups says that every group of the partition took every
// message the push stored there: no other pop can find them ready.
type Handed struct {
	Messages  []Message
	AllGroups bool
}

// PopResult is what a pop leased, and what it saw of the other partitions
// of its group that are ready.
type PopResult struct {
	Messages []Message
	// Ready are partitions the pop found ready and did not lease (or gave
	// back, as the reply could not carry them), least recently leased
	// first. ReadyKnown says that they were all of them when the pop's
	// statement began, among the partitions it could lease: it leased
	// something, read every cursor it could lease from (not a pop naming
	// its partition), and found no more ready ones than it reports.
	Ready      []string
	ReadyKnown bool
	// Kept are partitions the pop held locked and left ready: it claimed
	// them and leased nothing of them (its max ran out first), or gave
	// them back. A concurrent pop skipped them as locked and may have
	// taken its group for empty there; the bridge wakes the group's pops
	// for them.
	Kept []string
}

// Message is a delivered message.
type Message struct {
	// Queue is the message's queue when a namespace pop returned it
	// (Store.PopNamespace); empty from a pop of one queue.
	Queue     string
	Partition string
	Offset    int64
	ID        string
	Lease     string // empty with auto-ack
	Attempt   int
	CreatedAt time.Time
	Data      []byte
	Encoding  Encoding
	Headers   Headers // nil when the message has none
}

// AckStatus is how an ack settles a message.
type AckStatus uint8

const (
	// AckCompleted: done, with every earlier message of the lease.
	AckCompleted AckStatus = iota
	// AckRetry: done up to the one before; this and the rest of the lease
	// are deliverable again, without spending an attempt: at once, or
	// after the ack's DelayMS.
	AckRetry
	// AckFailed: like AckRetry, spending an attempt, and deliverable again
	// after the ack's DelayMS, else the queue's retry delay; dead-lettered
	// when the queue's max_attempts are spent.
	AckFailed
	// AckDead: dead-lettered at once.
	AckDead
)

// String is the status's name on the wire (protocol.AckCompleted, …).
func (s AckStatus) String() string {
	switch s {
	case AckCompleted:
		return protocol.AckCompleted
	case AckRetry:
		return protocol.AckRetry
	case AckFailed:
		return protocol.AckFailed
	case AckDead:
		return protocol.AckDead
	}
	return "status " + strconv.Itoa(int(s))
}

// Ack settles a leased message and, cumulatively, those before it in its
// lease.
type Ack struct {
	Partition string
	Offset    int64
	Lease     string
	Status    AckStatus
	// DelayMS, set only with AckRetry or AckFailed, is how long the
	// message is held back before its next delivery, in place of the
	// queue's retry delay; nil means the queue's (for AckRetry: none).
	DelayMS *int64
	// Error, set only with AckFailed or AckDead, is kept with the dead
	// letter the ack makes, if it makes one.
	Error string
}

// AckParams is one client's ack: acks of one group on one queue.
type AckParams struct {
	Queue QueueRef
	Group string // never empty: the decoder fills the default
	Acks  []Ack
}

// AckResult is the outcome of one Ack: OK, or why it settled nothing.
type AckResult struct {
	OK    bool
	Error string
	// More is set on an OK ack that may have made messages deliverable to
	// the group's other consumers: it ended its lease while the partition
	// held messages past it (as the ack's snapshot saw), or it was a retry,
	// failed or dead. Only then is waking the group's waiting pops worth a
	// query.
	More bool
	// Freed is set on an OK ack that ended its lease. A push to the
	// partition that committed after the ack's snapshot is not in More;
	// its own wake-up may have come while the lease still held the
	// partition, so whoever wakes pops must look at Freed too (see the
	// bridge's wake log).
	Freed bool
	// Settled is how many messages an OK ack completed: a cumulative ack
	// counts every message of its lease it settled, and 0 when an earlier
	// ack had settled them already. Retried is how many it made
	// deliverable again (a retry or failed ack: the message and the rest
	// of its lease). Dead is set when it gave the message up, into the
	// dead letters or, for a queue that keeps none, dropped; DeadBytes
	// is then the bytes kept. For metrics: nothing branches on them.
	Settled   int64
	Retried   int64
	Dead      bool
	DeadBytes int64
	// Hold is set on an OK retry or failed ack that holds its partition
	// back from the group before the next delivery: the messages become
	// deliverable again this long after the ack (and not before; More and
	// Freed are then unset), so that is when to wake the group's pops.
	Hold time.Duration
}

// AckOutcome is the outcome of one AckParams: a result per ack, in order,
// or the error that refused the whole request.
type AckOutcome struct {
	Results []AckResult
	Err     error
}

// TxnAck is one ack of a transaction: an Ack of a group on a queue.
type TxnAck struct {
	Queue QueueRef
	Group string // never empty: the decoder fills the default
	Ack
}

// TxnParams is one transaction: acks under live leases and pushes, to
// queues of one tenant, applied all together or not at all. A queue pushed
// to that does not exist is created with DefaultQueueConfig.
type TxnParams struct {
	Acks []TxnAck
	Push []PushParams
}

// TxnResult is the outcome of a committed transaction: a result per ack
// (each OK) and per push (a result per message), in request order.
type TxnResult struct {
	Acks []AckResult
	Push [][]PushResult
}

// RenewParams extends live leases of a queue.
type RenewParams struct {
	Queue   QueueRef
	Leases  []string
	LeaseMS int64 // 0 means the queue's lease_ms
}

// RenewResult is the outcome of renewing one lease.
type RenewResult struct {
	Lease     string
	OK        bool
	ExpiresAt time.Time
	Error     string
}

// PeekParams selects messages of one partition to read without leasing:
// Limit of them from offset From, or, when ID is set, the one message of
// that producer id.
type PeekParams struct {
	Queue     QueueRef
	Partition string // never empty
	From      int64  // at least 0
	Limit     int    // at least 1
	ID        string // a producer id; From and Limit unused
}

// PeekPage is what a peek read: messages in offset order (Lease empty,
// Attempt 0) and the offset to read from next, or -1 when the partition
// holds nothing past them now.
type PeekPage struct {
	Messages []Message
	Next     int64
}

// SeekParams moves a group's cursors on a queue, on every partition or on
// one, ending their leases. The group is created if needed.
type SeekParams struct {
	Queue     QueueRef
	Group     string // never empty
	Partition string // empty means every partition
	To        Start
}

// DLQParams selects a page of a queue's dead letters, oldest first.
type DLQParams struct {
	Queue QueueRef
	Group string // empty means every group
	Limit int    // at least 1
	After string // a cursor from the previous page
}

// DeadLetter is a message that a group gave up on.
type DeadLetter struct {
	DLQID     string
	Group     string
	Partition string
	Offset    int64
	ID        string
	Attempts  int
	Reason    string // the ack status or cause that dead-lettered it
	Error     string // the error text of the ack that dead-lettered it
	DeadAt    time.Time
	Data      []byte
	Encoding  Encoding
	Headers   Headers // the message's, nil when it had none
}

// Info is a queue's settings and live figures.
type Info struct {
	Name        string
	Config      QueueConfig
	CreatedAt   time.Time
	Messages    int64 // retained
	Bytes       int64 // retained payload bytes
	DeadLetters int64
	// PartitionCount and GroupCount count the whole queue's.
	PartitionCount int64
	GroupCount     int64
	// Partitions and Groups are one page of each, by name, as InfoParams
	// chose; MorePartitions and MoreGroups say that names follow it.
	Partitions     []PartitionInfo
	Groups         []GroupInfo
	MorePartitions bool
	MoreGroups     bool
}

// PageAt is where a listing by name resumes: after the name After, or,
// when Done, nowhere, as the listing ended on an earlier page.
type PageAt struct {
	After string
	Done  bool
}

// InfoParams selects a page of a queue's info: up to Limit partitions and
// up to Limit groups, each list resuming where the previous page left it.
type InfoParams struct {
	Queue      QueueRef
	Limit      int // at least 1
	Partitions PageAt
	Groups     PageAt
}

// ListParams selects a page of a tenant's queues, by name.
type ListParams struct {
	Tenant string
	Limit  int    // at least 1
	After  string // list the queues named after this; empty from the first
}

// QueueList is one page of a tenant's queues; More says that others
// follow it.
type QueueList struct {
	Queues []QueueSummary
	More   bool
}

// PartitionInfo is one partition's figures.
type PartitionInfo struct {
	Name       string
	NextOffset int64
	LowOffset  int64
}

// GroupInfo is one consumer group's state over a queue.
type GroupInfo struct {
	Name    string
	Pending int64 // messages not yet completed by the group
	Leased  int64 // partitions currently leased
}

// GroupState is one consumer group's lag over a queue: the groups verb.
type GroupState struct {
	Name    string
	Pending int64 // retained messages not yet completed by the group
	Leased  int64 // partitions currently leased
	Dead    int64 // dead letters kept for the group
	// OldestPendingAge is how long ago the oldest pending message was
	// pushed; 0 when Pending is 0.
	OldestPendingAge time.Duration
}

// QueueSummary is one line of the queue list.
type QueueSummary struct {
	Name       string
	Partitions int64
	Messages   int64
	Bytes      int64
	Groups     int64
	Pending    int64 // the largest backlog of any group
}

// ReadyCheck names what a parked long poll waits for: messages of group
// in queue, in Partition or, when it is empty, in any partition.
type ReadyCheck struct {
	Queue     QueueRef
	Group     string
	Partition string
}
