package comb

import (
	"errors"
	"strconv"
)

// Sentinel errors for the wire error codes. A service error matches the
// sentinel of its code with errors.Is, e.g. errors.Is(err, comb.ErrNotFound).
var (
	// ErrBadRequest is code 400: malformed JSON, a bad name, an unknown field
	// value or ack status. Retrying the same request will not help.
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound is code 404: the queue does not exist (pop, ack, renew,
	// info, delete and dlq do not create queues; push, put and configure do).
	ErrNotFound = errors.New("not found")
	// ErrConflict is code 409: a lease conflict the whole request depends on.
	ErrConflict = errors.New("conflict")
	// ErrTooLarge is code 413: a message or a request over its size limit.
	ErrTooLarge = errors.New("too large")
	// ErrLimit is code 429: a queue limit (max_messages, max_bytes) is
	// reached; retry later.
	ErrLimit = errors.New("limit reached")
	// ErrUnavailable is code 503: PostgreSQL is unreachable for an operation
	// the spool cannot take; retry later.
	ErrUnavailable = errors.New("unavailable")
	// ErrInternal is code 500: a bug in the service; the message carries the
	// request id the service logged it under.
	ErrInternal = errors.New("internal error")
)

// Error is an error reply of the Comb service: the request reached the
// service and was refused. Code is the wire code (the value of the
// Nats-Service-Error-Code header) and Message the service's explanation.
type Error struct {
	Code    int
	Message string
}

// Error returns the service's message followed by the code.
func (e *Error) Error() string {
	return e.Message + " (" + strconv.Itoa(e.Code) + ")"
}

// Is reports whether target is the sentinel error of e's code, so that
// errors.Is(err, ErrNotFound) holds for a 404.
func (e *Error) Is(target error) bool {
	s := sentinel(e.Code)
	return s != nil && s == target
}

// Temporary reports whether the same request may succeed later without
// change: 429 and 503.
func (e *Error) Temporary() bool {
	return e.Code == 429 || e.Code == 503
}

func sentinel(code int) error {
	switch code {
	case 400:
		return ErrBadRequest
	case 404:
		return ErrNotFound
	case 409:
		return ErrConflict
	case 413:
		return ErrTooLarge
	case 429:
		return ErrLimit
	case 500:
		return ErrInternal
	case 503:
		return ErrUnavailable
	}
	return nil
}
