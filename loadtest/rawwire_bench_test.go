package loadtest

import (
	"context"
	"testing"
	"time"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/combtest"
)

// What the loader's raw client costs on its side of a request, as
// clients/go's benchmarks measure it (combtest.BenchClient):
//
//	go test ./loadtest -run '^$' -bench RawClient -benchmem

func BenchmarkRawClientPush(b *testing.B) {
	nc := combtest.Canned(b, combtest.CannedReply)
	c, payloads := newRawClient(nc, "q"), [][]byte{make([]byte, 256)}
	body := appendPushBody(nil, "p", payloads, EncodingBinary, msgIDs{}, nil)
	combtest.BenchClient(b, nc, c.subPush, body, nil, "raw", func() error {
		_, err := c.push(context.Background(), "p", payloads, EncodingBinary, msgIDs{})
		return err
	})
}

func BenchmarkRawClientPop(b *testing.B) {
	nc := combtest.Canned(b, combtest.CannedReply)
	c := newRawClient(nc, "q")
	body := popRequestBody(comb.PopOptions{Group: "g", Max: 1, Partitions: 1, Wait: time.Second})
	out := make([]comb.Delivery, 0, 1)
	combtest.BenchClient(b, nc, c.subPop, body, nil, "raw", func() error {
		_, err := c.pop(context.Background(), body, time.Second, out[:0])
		return err
	})
}

func BenchmarkRawClientAck(b *testing.B) {
	nc := combtest.Canned(b, combtest.CannedReply)
	c := newRawClient(nc, "q")
	acks := []comb.Ack{{Partition: "p", Offset: 41, Lease: "l-7-0123456789abcdef"}}
	combtest.BenchClient(b, nc, c.subAck, appendAckBody(nil, "g", acks), nil, "raw", func() error {
		_, err := c.ack(context.Background(), "g", acks)
		return err
	})
}
