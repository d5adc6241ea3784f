package comb_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/combtest"
)

// What clients/go costs on its side of a request, against a responder
// that answers at once (combtest.Canned): each verb as the client sends
// it ("client"), and as a bare nats request with the bytes the client
// sends ("bare"). The difference is the client's: encoding the request,
// decoding the reply, its context and checks.
//
//	go test ./clients/go -run '^$' -bench . -benchmem
//
// docs/benchmarks.md has figures against the light-load shape's latency.

func BenchmarkClientPut(b *testing.B) {
	nc := combtest.Canned(b, combtest.CannedReply)
	c, data := comb.New(nc), make([]byte, 256)
	combtest.BenchClient(b, nc, "comb.put.q", data, nats.Header{comb.HeaderPartition: {"p"}}, "client", func() error {
		_, err := c.Put(context.Background(), "q", data, comb.PutOptions{Partition: "p"})
		return err
	})
}

func BenchmarkClientPush(b *testing.B) {
	nc := combtest.Canned(b, combtest.CannedReply)
	c, data := comb.New(nc), []byte(`"`+strings.Repeat("x", 254)+`"`)
	combtest.BenchClient(b, nc, "comb.push.q", []byte(`{"messages":[{"partition":"p","data":`+string(data)+`}]}`), nil, "client", func() error {
		_, err := c.Push(context.Background(), "q", []comb.Message{{Partition: "p", Data: data}})
		return err
	})
}

func BenchmarkClientPop(b *testing.B) {
	nc := combtest.Canned(b, combtest.CannedReply)
	c := comb.New(nc)
	combtest.BenchClient(b, nc, "comb.pop.q", []byte(`{"group":"g","max":1,"wait_ms":1000}`), nil, "client", func() error {
		_, err := c.Pop(context.Background(), "q", comb.PopOptions{Group: "g", Max: 1, Wait: time.Second})
		return err
	})
}

func BenchmarkClientAck(b *testing.B) {
	nc := combtest.Canned(b, combtest.CannedReply)
	c := comb.New(nc)
	combtest.BenchClient(b, nc, "comb.ack.q", []byte(`{"group":"g","acks":[{"partition":"p","offset":41,"lease":"l-7-0123456789abcdef"}]}`), nil, "client", func() error {
		_, err := c.Ack(context.Background(), "q", "g", []comb.Ack{{Partition: "p", Offset: 41, Lease: "l-7-0123456789abcdef"}})
		return err
	})
}
