// Package comb is the Go client of Comb, a partitioned message queue that
// persists into PostgreSQL and is reached only through NATS request-reply.
//
// The client is a thin layer over nats.go: every method sends one request on
// a subject of the form <prefix>.<verb>.<queue> (prefix "comb" by default)
// and decodes the JSON reply. The subjects, headers, codes and the JSON
// shapes of every request and reply live in the package
// github.com/combmq/comb/protocol, which this client encodes and decodes
// with encoding/json; the types here that are exactly a wire shape (Config,
// Info, PushResult, …) are aliases of protocol's, and the rest (Message,
// Delivery, Ack, …) are converted to and from it. docs/protocol.md in the
// repository is the full description, with nats CLI examples.
//
// A message is an opaque byte string. On the wire it travels as "data" when
// its bytes are compact, valid JSON (so they stay readable in the CLI and
// arrive byte for byte), and as base64 in "data_b64" otherwise; the client
// chooses for you and hands you back the same bytes.
//
// Delivery is at least once. A consumer group pops messages under a lease,
// one lease per partition at a time, so a partition's messages reach a group
// in order; it settles them with a cumulative ack. Client.Consume runs that
// loop for you, with asynchronous, bounded acks.
//
// Errors the service reports carry a wire code; they are *Error values
// (protocol.Error) that match the sentinel errors (ErrBadRequest,
// ErrNotFound, …, protocol's) with errors.Is.
package comb
