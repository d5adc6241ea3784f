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

// The same comparison against a real Comb (the examples' own, on a test
// PostgreSQL), request by request: each iteration alternates a call of
// the client with a bare request of the bytes it sends, so that a noisy
// machine's drift falls on both alike. client-µs and bare-µs are each
// side's mean round trip.
//
//	go test ./clients/go -run '^$' -bench Interleaved -benchtime 4000x -count 4

func BenchmarkInterleavedPush(b *testing.B) {
	c, data := comb.New(nc), []byte(`"`+strings.Repeat("x", 254)+`"`)
	body := []byte(`{"messages":[{"partition":"p","data":` + string(data) + `}]}`)
	benchInterleaved(b, &nats.Msg{Subject: "comb.push.bench.interleaved", Data: body}, func(ctx context.Context) error {
		_, err := c.Push(ctx, "bench.interleaved", []comb.Message{{Partition: "p", Data: data}})
		return err
	})
}

func BenchmarkInterleavedPut(b *testing.B) {
	c, data := comb.New(nc), []byte(`"`+strings.Repeat("x", 254)+`"`)
	bare := &nats.Msg{Subject: "comb.put.bench.interleaved", Data: data, Header: nats.Header{comb.HeaderPartition: {"p"}}}
	benchInterleaved(b, bare, func(ctx context.Context) error {
		_, err := c.Put(ctx, "bench.interleaved", data, comb.PutOptions{Partition: "p"})
		return err
	})
}

// benchInterleaved alternates call with bare requests of msg, each under
// a deadline of its own, as the client's are, in a context that can end
// (the loader's kind).
func benchInterleaved(b *testing.B, msg *nats.Msg, call func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var took [2]time.Duration
	var n [2]int
	for i := 0; b.Loop(); i++ {
		side, start := i%2, time.Now()
		var err error
		if side == 0 {
			err = call(ctx)
		} else {
			rctx, done := context.WithTimeout(ctx, comb.DefaultTimeout)
			var reply *nats.Msg
			if reply, err = nc.RequestMsgWithContext(rctx, msg); err == nil {
				err = comb.ReplyError(reply)
			}
			done()
		}
		if err != nil {
			b.Fatal(err)
		}
		took[side] += time.Since(start)
		n[side]++
	}
	b.ReportMetric(float64(took[0].Microseconds())/float64(max(n[0], 1)), "client-µs")
	b.ReportMetric(float64(took[1].Microseconds())/float64(max(n[1], 1)), "bare-µs")
}
