// Package comb is the Go client of Comb, a partitioned message queue that
// persists into PostgreSQL and is reached only through NATS request-reply.
//
// The client is a thin layer over nats.go: every method sends one request on
// a subject of the form <prefix>.<verb>.<queue> (prefix "comb" by default)
// and decodes the JSON reply. The request and reply types in this package
// mirror the wire protocol field for field, so the package also serves as a
// readable statement of it; docs/protocol.md in the repository is the full
// description, with nats CLI examples.
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
// Errors the service reports carry a wire code; they are *Error values that
// match the sentinel errors (ErrBadRequest, ErrNotFound, …) with errors.Is.
package comb
