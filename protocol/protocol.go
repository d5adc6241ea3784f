// Package protocol is Comb's wire contract in Go: subjects and verbs,
// header names, status strings, error codes, defaults and limits, and the
// JSON shapes of every request and reply. It imports nothing but the
// standard library, so any client may use it without pulling in PostgreSQL
// drivers or a NATS server.
//
// The shapes here are the reference: clients encode and decode them with
// encoding/json. The broker writes its hot replies (push, pop, ack) by hand
// and parses push bodies by hand, for speed; tests hold those against
// these types.
package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is the protocol version this package describes. Additions keep
// the version; a change that breaks a client would raise it.
const Version = 1

// DefaultPrefix is the first subject token(s) of every request unless the
// broker is configured with another prefix.
const DefaultPrefix = "comb"

// InternalPrefix is the root of the brokers' own subjects, such as the
// wake-ups on "_COMB.<prefix>.wake.<queue>". No client has business on
// them; with authentication on, the embedded server denies them to every
// user but Comb's own and the trusted ones.
const InternalPrefix = "_COMB"

// ServiceName is the name the broker registers with the NATS micro
// framework (`nats micro info comb`).
const ServiceName = "comb"

// The verbs: the token after the prefix.
const (
	VerbPush      = "push"
	VerbPut       = "put"
	VerbPop       = "pop"
	VerbAck       = "ack"
	VerbRenew     = "renew"
	VerbConfigure = "configure"
	VerbInfo      = "info"
	VerbList      = "list"
	VerbDelete    = "delete"
	VerbDLQ       = "dlq"
	VerbSeek      = "seek"
	// VerbGroups lists a queue's consumer groups with their lag, or, with
	// {"delete":"<group>"}, deletes one (see GroupsRequest).
	VerbGroups = "groups"
	// VerbPeek reads a partition's messages without leasing or changing
	// anything (see PeekRequest). Behind authentication only operators
	// should be granted it (docs/security.md).
	VerbPeek = "peek"
	// VerbTxn settles acks and pushes messages, across queues of one
	// tenant, in one transaction: "<prefix>.txn", with no queue (see
	// TxnRequest).
	VerbTxn = "txn"
	// VerbNamespacePop pops every queue under a namespace:
	// "<prefix>.npop.billing" leases from billing.invoices,
	// billing.refunds and any other queue whose name starts with
	// "billing.", spreading pops over them. Each message says its queue
	// (Delivery.Queue); ack and renew go to that queue's own subjects. Its
	// body is a PopRequest without partition. NATS permissions scope it
	// like any verb; see docs/security.md for what to grant with it.
	VerbNamespacePop = "npop"
	// VerbMaintenance is an operator verb, "<prefix>.maintenance" with no
	// queue: it turns a bridge's maintenance mode on or off (see
	// MaintenanceRequest). It is served in the global account only, never
	// to a tenant, and is not in Verbs.
	VerbMaintenance = "maintenance"
)

// OperatorVerbs lists the verbs an operator uses on a bridge, not a
// client on a queue; they take no queue name.
var OperatorVerbs = []string{VerbMaintenance}

// Verbs lists every verb, in the order the broker registers its endpoints.
var Verbs = []string{VerbPush, VerbPut, VerbPop, VerbAck, VerbRenew, VerbConfigure, VerbInfo, VerbList, VerbDelete, VerbDLQ, VerbSeek, VerbGroups, VerbPeek,
	VerbTxn, VerbNamespacePop}

// TakesQueue reports whether a verb's subject names a queue
// (<prefix>.<verb>.<queue>); list, txn and maintenance take none.
func TakesQueue(verb string) bool {
	return verb != VerbList && verb != VerbTxn && verb != VerbMaintenance
}

// Subject returns the subject of a request: <prefix>.<verb>.<queue>, or
// <prefix>.<verb> for the verbs that take no queue (TakesQueue).
func Subject(prefix, verb, queue string) string {
	if !TakesQueue(verb) {
		return prefix + "." + verb
	}
	return prefix + "." + verb + "." + queue
}

// ParseSubject splits a request subject "<prefix>.<verb>.<queue>" into its
// verb and queue, checking the queue name. The verbs that take no queue
// (TakesQueue) return queue "": "<prefix>.list".
func ParseSubject(prefix, subject string) (verb, queue string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok || !strings.HasPrefix(rest, ".") {
		return "", "", BadRequest("subject %q: does not start with %q", subject, prefix+".")
	}
	verb, queue, hasQueue := strings.Cut(rest[1:], ".")
	switch verb {
	case VerbList, VerbTxn, VerbMaintenance:
		if hasQueue {
			return "", "", BadRequest("subject %q: %s takes no queue name", subject, verb)
		}
		return verb, "", nil
	case VerbPush, VerbPut, VerbPop, VerbAck, VerbRenew, VerbConfigure, VerbInfo, VerbDelete, VerbDLQ, VerbSeek, VerbGroups, VerbPeek,
		VerbNamespacePop:
	default:
		return "", "", BadRequest("subject %q: unknown verb %q", subject, verb)
	}
	if !hasQueue || queue == "" {
		return "", "", BadRequest("subject %q: queue name missing", subject)
	}
	if err := ValidateQueue(queue); err != nil {
		return "", "", err
	}
	return verb, queue, nil
}

// Headers.
const (
	// HeaderPartition and HeaderID carry a put's partition and producer id.
	HeaderPartition = "Comb-Partition"
	HeaderID        = "Comb-Id"
	// HeaderDelayMS and HeaderNotBefore hold a put's message back, like a
	// push message's delay_ms and not_before.
	HeaderDelayMS   = "Comb-Delay-Ms"
	HeaderNotBefore = "Comb-Not-Before"
	// HeaderReservedPrefix starts the names of Comb's own headers: a
	// message may not carry headers of that name, and a put with an
	// unknown one is a 400.
	HeaderReservedPrefix = "Comb-"
	// HeaderError and HeaderErrorCode are the NATS micro framework's error
	// headers, set on every error reply: the message and the code.
	HeaderError     = "Nats-Service-Error"
	HeaderErrorCode = "Nats-Service-Error-Code"
	// HeaderRetryAfterMS is set on a 429 that knows when the same request
	// may succeed: whole milliseconds from the reply (a tenant's quota).
	HeaderRetryAfterMS = "Comb-Retry-After-Ms"
)

// Push statuses, in PushResult.Status.
const (
	// StatusStored: the message is durable in PostgreSQL at its offset.
	StatusStored = "stored"
	// StatusDuplicate: a message with the same id was stored in the
	// partition within the queue's dedup window; the offset is the
	// original's.
	StatusDuplicate = "duplicate"
	// StatusSpooled: accepted into the broker's local disk spool while
	// PostgreSQL is unreachable or the broker is in maintenance mode; no
	// offset yet. The broker has fsynced it and stores it, in order, when
	// PostgreSQL is back: do not push it again.
	StatusSpooled = "spooled"
)

// Ack statuses, in Ack.Status.
const (
	// AckCompleted settles the message and every earlier one of its lease.
	AckCompleted = "completed"
	// AckRetry settles the earlier messages of the lease; this one and the
	// rest of the lease become deliverable again, without spending an
	// attempt: at once, or after the ack's delay_ms.
	AckRetry = "retry"
	// AckFailed is AckRetry spending an attempt, and deliverable again
	// after the ack's delay_ms or else the queue's retry delay: when the
	// queue's max_attempts are spent the message is dead-lettered.
	AckFailed = "failed"
	// AckDead dead-letters the message at once.
	AckDead = "dead"
)

// Values of PopRequest.From (besides an RFC 3339 time).
const (
	// FromAll starts a new group at the oldest retained message.
	FromAll = "all"
	// FromNew starts a new group at the next message pushed.
	FromNew = "new"
)

// Values of SeekRequest.To (besides an RFC 3339 time).
const (
	SeekStart = "start"
	SeekEnd   = "end"
)

// Wire error codes. They follow HTTP's meanings so that any client can map
// them without reading Comb's code.
const (
	CodeBadRequest  = 400
	CodeNotFound    = 404
	CodeConflict    = 409
	CodeTooLarge    = 413
	CodeTooMany     = 429
	CodeInternal    = 500
	CodeUnavailable = 503
)

// Sentinel errors, one per code. An *Error matches the sentinel of its code
// with errors.Is, e.g. errors.Is(err, protocol.ErrNotFound).
var (
	// ErrBadRequest is code 400: malformed JSON, a bad name, an unknown
	// field value or ack status. Retrying the same request will not help.
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound is code 404: the queue does not exist (pop, ack, renew,
	// info, delete, dlq and groups do not create queues; push, put and
	// configure do), or a group delete names a group the queue does not have.
	ErrNotFound = errors.New("not found")
	// ErrConflict is code 409: a lease conflict the whole request depends on.
	ErrConflict = errors.New("conflict")
	// ErrTooLarge is code 413: a message or a request over its size limit.
	ErrTooLarge = errors.New("too large")
	// ErrLimit is code 429: a queue limit (max_messages, max_bytes) is
	// reached, or the broker is overloaded; retry later.
	ErrLimit = errors.New("limit reached")
	// ErrUnavailable is code 503: PostgreSQL is unreachable, or the broker
	// is stopping; retry later.
	ErrUnavailable = errors.New("unavailable")
	// ErrInternal is code 500: a bug in the broker; the message carries the
	// request id the broker logged it under.
	ErrInternal = errors.New("internal error")
)

// Error is a protocol error: a code and a message for people. The broker
// sends it as the error headers and ErrorReply; clients return it.
type Error struct {
	Code    int
	Message string
	// RetryAfterMS, when set, is how many milliseconds from the reply the
	// same request may succeed (HeaderRetryAfterMS); only on a 429.
	RetryAfterMS int64
}

// Error returns the message followed by the code.
func (e *Error) Error() string { return e.Message + " (" + strconv.Itoa(e.Code) + ")" }

// Is reports whether target is the sentinel error of e's code, so that
// errors.Is(err, ErrNotFound) holds for a 404.
func (e *Error) Is(target error) bool {
	s := Sentinel(e.Code)
	return s != nil && s == target
}

// Temporary reports whether the same request may succeed later without
// change: 429 and 503.
func (e *Error) Temporary() bool { return e.Code == CodeTooMany || e.Code == CodeUnavailable }

// Sentinel returns the sentinel error of a code, or nil.
func Sentinel(code int) error {
	switch code {
	case CodeBadRequest:
		return ErrBadRequest
	case CodeNotFound:
		return ErrNotFound
	case CodeConflict:
		return ErrConflict
	case CodeTooLarge:
		return ErrTooLarge
	case CodeTooMany:
		return ErrLimit
	case CodeInternal:
		return ErrInternal
	case CodeUnavailable:
		return ErrUnavailable
	}
	return nil
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadRequest is Errorf with CodeBadRequest.
func BadRequest(format string, args ...any) *Error {
	return Errorf(CodeBadRequest, format, args...)
}

// AsError returns err as an *Error when it is one (or wraps one).
func AsError(err error) (*Error, bool) {
	var pe *Error
	if errors.As(err, &pe) {
		return pe, true
	}
	return nil, false
}
