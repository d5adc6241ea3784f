// Package wire holds Comb's wire protocol: subject parsing, name rules, the
// JSON request decoders with their validation, and the reply encoders. It
// knows nothing of NATS connections or PostgreSQL; the bridge calls it on
// every request, so the decoders reject anything the protocol does not allow
// with a 400 (or 413) whose message names what is wrong, and the encoders
// keep message bytes exactly as they were pushed.
package wire

import (
	"errors"
	"fmt"
	"strconv"
)

// Wire error codes. They follow HTTP's meanings so that any client can map
// them without reading our code.
const (
	CodeBadRequest  = 400
	CodeNotFound    = 404
	CodeConflict    = 409
	CodeTooLarge    = 413
	CodeTooMany     = 429
	CodeInternal    = 500
	CodeUnavailable = 503
)

// Error is a protocol error: a code from the table in the protocol and a
// message for humans. Decoders return it; the bridge sends it as the error
// body and the micro error headers.
type Error struct {
	Code    int
	Message string
}

// Error returns the message, prefixed with the code so that logs read well.
func (e *Error) Error() string { return strconv.Itoa(e.Code) + " " + e.Message }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// badRequest is the common case of Errorf.
func badRequest(format string, args ...any) *Error {
	return Errorf(CodeBadRequest, format, args...)
}

// AsError returns err as an *Error when it is one (or wraps one).
func AsError(err error) (*Error, bool) {
	var we *Error
	if errors.As(err, &we) {
		return we, true
	}
	return nil, false
}

// ErrorBody returns the protocol's error body,
// {"error":{"code":400,"message":"…"}}.
func ErrorBody(code int, message string) []byte {
	b := make([]byte, 0, 40+len(message))
	b = append(b, `{"error":{"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"message":`...)
	b = AppendString(b, message)
	b = append(b, "}}"...)
	return b
}
