package combtest

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/procstat"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// Canned starts a NATS server on loopback with a responder that answers
// every request on comb.<verb>.… at once with reply(verb), and returns a
// connection to it: a broker of no cost, for benchmarks of what a client
// spends on its side of a request. Everything stops when tb ends.
func Canned(tb testing.TB, reply func(verb string) []byte) *nats.Conn {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatalf("canned: %v", err)
	}
	ns.Start()
	tb.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatal("canned: the NATS server did not start")
	}
	connect := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			tb.Fatalf("canned: %v", err)
		}
		tb.Cleanup(nc.Close)
		return nc
	}
	responder := connect()
	replies := map[string][]byte{}
	if _, err := responder.Subscribe("comb.>", func(m *nats.Msg) {
		verb, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, "comb."), ".")
		r, ok := replies[verb]
		if !ok {
			r = reply(verb)
			replies[verb] = r // one subscription: one goroutine
		}
		_ = m.Respond(r)
	}); err != nil {
		tb.Fatalf("canned: %v", err)
	}
	if err := responder.Flush(); err != nil {
		tb.Fatalf("canned: %v", err)
	}
	return connect()
}

// CannedReply is the reply a broker gives to a request of verb for one
// message (a push or put stored, a pop of 256 bytes, an ack settled); {}
// for the other verbs.
func CannedReply(verb string) []byte {
	switch verb {
	case protocol.VerbPut, protocol.VerbPush:
		return wire.PushReply([]domain.PushResult{{Partition: "p", Offset: 41, Status: domain.Stored}})
	case protocol.VerbPop:
		r, _ := wire.PopReply([]domain.Message{{Partition: "p", Offset: 41, Lease: "l-7-0123456789abcdef", Attempt: 1,
			CreatedAt: time.Date(2026, 12, 4, 1, 2, 3, 0, time.UTC), Data: make([]byte, 256), Encoding: domain.EncodingBinary}}, 1<<20)
		return r
	case protocol.VerbAck:
		return wire.AckReply([]domain.AckResult{{OK: true}})
	}
	return []byte(`{}`)
}

// BenchClient measures what a client spends on its side of one request:
// call, as sub-benchmark name, against a bare request on nc of subject
// with body and hdr (the bytes the client sends), as "bare". nc should be
// Canned's. Besides the time each reports the process's CPU time an op
// (cpu-µs/op; the NATS server's and the responder's are in both alike):
// on a shared machine the steadier figure, and the difference is the
// client's.
func BenchClient(b *testing.B, nc *nats.Conn, subject string, body []byte, hdr nats.Header, name string, call func() error) {
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		cpu := procstat.SelfCPU()
		for b.Loop() {
			m := nats.NewMsg(subject)
			m.Data, m.Header = body, hdr
			if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(procstat.SelfCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
	})
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		cpu := procstat.SelfCPU()
		for b.Loop() {
			if err := call(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(procstat.SelfCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
	})
}
