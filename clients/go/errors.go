package comb

import "github.com/combmq/comb/protocol"

// Sentinel errors for the wire error codes, those of the protocol package.
// A service error matches the sentinel of its code with errors.Is, e.g.
// errors.Is(err, comb.ErrNotFound).
var (
	// ErrBadRequest is code 400: malformed JSON, a bad name, an unknown field
	// value or ack status. Retrying the same request will not help.
	ErrBadRequest = protocol.ErrBadRequest
	// ErrNotFound is code 404: the queue does not exist (pop, ack, renew,
	// info, delete and dlq do not create queues; push, put and configure do).
	ErrNotFound = protocol.ErrNotFound
	// ErrConflict is code 409: a lease conflict the whole request depends on.
	ErrConflict = protocol.ErrConflict
	// ErrTooLarge is code 413: a message or a request over its size limit.
	ErrTooLarge = protocol.ErrTooLarge
	// ErrLimit is code 429: a queue limit (max_messages, max_bytes) or a
	// tenant's quota is reached, or the broker is overloaded; retry later
	// (after Error.RetryAfterMS, when the reply says).
	ErrLimit = protocol.ErrLimit
	// ErrUnavailable is code 503: PostgreSQL is unreachable or too slow, or
	// the broker is stopping; retry later.
	ErrUnavailable = protocol.ErrUnavailable
	// ErrInternal is code 500: a bug in the service; the message carries the
	// request id the service logged it under.
	ErrInternal = protocol.ErrInternal
)

// Error is an error reply of the Comb service: the request reached the
// service and was refused. Code is the wire code (the value of the
// Nats-Service-Error-Code header) and Message the service's explanation;
// Error() is "message (code)". Errors the client makes itself for a request
// it will not send (an empty queue name) are of this type too, code 400.
type Error = protocol.Error
