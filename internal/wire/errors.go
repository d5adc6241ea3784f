// Package wire is the broker's side of the JSON protocol: the request
// decoders with their validation, from protocol's shapes into domain
// requests, and the reply encoders, from domain outcomes into protocol's
// shapes. It knows nothing of NATS connections or PostgreSQL. The bridge
// calls it on every request, so the decoders reject anything the protocol
// does not allow with a 400 (or 413) whose message names what is wrong, and
// the encoders keep message bytes exactly as they were pushed.
//
// The push decoder and the pop, push and ack reply encoders are written by
// hand for speed; tests and fuzzing hold them to encoding/json and the
// protocol package's types.
package wire

import (
	"encoding/json"

	"github.com/combmq/comb/protocol"
)

// badRequest is protocol.BadRequest, the decoders' common error.
func badRequest(format string, args ...any) *protocol.Error {
	return protocol.BadRequest(format, args...)
}

// ErrorBody returns the protocol's error body, protocol.ErrorReply:
// {"error":{"code":400,"message":"…"}}, with "retry_after_ms" when
// retryAfterMS is positive.
func ErrorBody(code int, message string, retryAfterMS int64) []byte {
	b, err := json.Marshal(protocol.ErrorReply{Error: protocol.ErrorBody{Code: code, Message: message, RetryAfterMS: retryAfterMS}})
	if err != nil {
		panic(err) // an int and a string
	}
	return b
}
