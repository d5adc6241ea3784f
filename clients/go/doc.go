// Package comb is the Go client of Comb, a partitioned message queue that
// persists into PostgreSQL and is reached only through NATS request-reply.
//
// The client is a thin layer over nats.go: every method sends one request on
// a subject of the form <prefix>.<verb>.<queue> (prefix "comb" by default)
// and decodes the JSON reply. The subjects, headers, codes and the JSON
// shapes of every request and reply live in the package
// github.com/combmq/comb/protocol, which this client encodes and decodes
// with encoding/json, except on the hot verbs: pop and ack bodies are
// written by hand, and the replies of push, put, pop, ack and txn are read
// by a hand-written reader that falls back to encoding/json on anything
// the broker would not write (DecodePopReply and its kin, which programs
// that send their own requests may use too). The types here that are
// exactly a wire shape (Config, Info, PushResult, …) are aliases of
// protocol's, and the rest (Message, Delivery, Ack, …) are converted to
// and from it. docs/protocol.md in the repository is the full
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
// Errors the service reports carry a wire code; they are *Error values
// (protocol.Error) that match the sentinel errors (ErrBadRequest,
// ErrNotFound, …, protocol's) with errors.Is.
//
// # Connecting to a broker with authentication
//
// The client takes a *nats.Conn, so a broker that requires authentication
// or TLS (docs/security.md) is reached with nats.Connect's own options:
//
//	nats.Connect("nats://app:app-secret@host:4222")          // user and password in the URL
//	nats.Connect(url, nats.UserInfo("app", "app-secret"))     // or as an option
//	nats.Connect("nats://s3cr3t-token@host:4222")             // a token in the URL
//	nats.Connect(url, nats.Token("s3cr3t-token"))             // or as an option
//	opt, err := nats.NkeyOptionFromSeed("app.nk")             // an nkey: the seed file signs the server's nonce
//	nats.Connect(url, opt)
//	nats.Connect(url, nats.UserCredentials("app.creds"))      // a .creds file (user JWT and seed)
//	nats.Connect("tls://host:4222", nats.RootCAs("ca.pem"))   // TLS, with the CA that signed the server
//	nats.Connect(url, nats.RootCAs("ca.pem"),
//		nats.ClientCert("app.pem", "app-key.pem"))            // mutual TLS, e.g. verify_and_map
//	nats.Connect(url, nats.CustomInboxPrefix("_INBOX_app"))  // replies on a private inbox prefix
//	nats.Connect("nats://a:4222,nats://b:4222,nats://c:4222", // several brokers in one cluster:
//		nats.MaxReconnects(-1))                               // any of them, and another when it goes
//
// A .creds file is for a NATS server in operator (JWT) mode, which
// `comb serve` refuses for now (docs/security.md).
package comb
