package store_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// The store benchmarks measure the log engine alone, without NATS or JSON,
// in the reference shape: 200 partitions, 256-byte payloads, pushes of 100
// messages, leased pops and cumulative acks. Compare their msgs/s with
// shared/tools/pg-ceiling.sh on the same machine:
//
//	go test ./store -run '^$' -bench . -benchtime 10s
//
// pgtest runs benchmarks on a durable cluster (fsync on); see its docs.

const benchPartitions = 200

func benchPushRequest(n int, payload []byte, seq *atomic.Int64) domain.PushParams {
	r := domain.PushParams{Queue: domain.Global("bench"), Messages: make([]domain.PushMessage, n)}
	base := seq.Add(int64(n))
	for i := range r.Messages {
		r.Messages[i] = domain.PushMessage{
			Partition: "p" + strconv.Itoa(int((base+int64(i))/int64(n))%benchPartitions),
			Data:      payload,
			Encoding:  domain.EncodingBinary,
		}
	}
	return r
}

// BenchmarkPush pushes 100-message requests from concurrent goroutines, one
// request per store.Push call (no coalescing: that is the bridge's job).
func BenchmarkPush(b *testing.B) { benchPushes(b, 100) }

// BenchmarkPushOne pushes one message a call from concurrent goroutines, a
// partition after another: the light-load shape, where every push is a
// transaction of its own.
func BenchmarkPushOne(b *testing.B) { benchPushes(b, 1) }

// benchPushes pushes n-message requests from four goroutines, one request
// per store.Push call, and reports messages a second.
func benchPushes(b *testing.B, n int) {
	st := newStore(b)
	payload := make([]byte, 256)
	var seq atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			outs, err := st.Push(context.Background(), []domain.PushParams{benchPushRequest(n, payload, &seq)})
			if err != nil || outs[0].Err != nil {
				b.Error(err, outs)
				return
			}
		}
	})
	b.ReportMetric(float64(seq.Load())/time.Since(start).Seconds(), "msgs/s")
}

// benchFill pushes at least b.N messages in 100-message requests and
// returns how many it pushed.
func benchFill(b *testing.B, st *store.Store) int64 {
	payload := make([]byte, 256)
	var seq atomic.Int64
	for seq.Load() < int64(b.N) {
		outs, err := st.Push(context.Background(), []domain.PushParams{benchPushRequest(100, payload, &seq)})
		if err != nil || outs[0].Err != nil {
			b.Fatal(err, outs)
		}
	}
	return seq.Load()
}

// benchConsumers is how many goroutines drain a queue in benchDrain.
const benchConsumers = 6

// benchDrain fills a queue with at least b.N messages (benchFill), then
// drains it with benchConsumers goroutines, each calling round for its
// c and its r-th round until every message is done, and reports messages a
// second. round returns how many messages it settled.
func benchDrain(b *testing.B, round func(ctx context.Context, st *store.Store, c, r int) (int, error)) {
	st := newStore(b)
	ctx := context.Background()
	total := benchFill(b, st)
	var done atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range benchConsumers {
		wg.Go(func() {
			for r := 0; done.Load() < total; r++ {
				n, err := round(ctx, st, c, r)
				if err != nil {
					b.Error(err)
					return
				}
				done.Add(int64(n))
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkPopAck drains a pre-filled queue with concurrent consumers that
// pop up to 4 partitions x 500 messages and ack each lease cumulatively;
// b.N counts messages.
func BenchmarkPopAck(b *testing.B) {
	benchDrain(b, func(ctx context.Context, st *store.Store, _, _ int) (int, error) {
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("bench"), Max: 2000, Partitions: 4})
		if err != nil {
			return 0, err
		}
		last := map[string]domain.Message{}
		for _, m := range ms {
			last[m.Lease] = m
		}
		r := domain.AckParams{Queue: domain.Global("bench")}
		for _, m := range last {
			r.Acks = append(r.Acks, domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
		}
		if len(r.Acks) > 0 {
			outs, err := st.Ack(ctx, []domain.AckParams{r})
			if err == nil && outs[0].Err != nil {
				err = outs[0].Err
			}
			if err != nil {
				return 0, err
			}
		}
		return len(ms), nil
	})
}

// BenchmarkPopOneAck drains a pre-filled queue one message at a time:
// each consumer, over its own share of the partitions, pops one message
// of a named partition and acks it; b.N counts messages.
func BenchmarkPopOneAck(b *testing.B) {
	benchDrain(b, func(ctx context.Context, st *store.Store, c, r int) (int, error) {
		part := "p" + strconv.Itoa((c+r*benchConsumers)%benchPartitions)
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global("bench"), Partition: part, Max: 1})
		if err != nil || len(ms) == 0 {
			return 0, err
		}
		m := ms[0]
		outs, err := st.Ack(ctx, []domain.AckParams{{Queue: domain.Global("bench"), Acks: []domain.Ack{{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease}}}})
		if err == nil && (outs[0].Err != nil || !outs[0].Results[0].OK) {
			err = fmt.Errorf("ack: %v %+v", outs[0].Err, outs[0].Results)
		}
		if err != nil {
			return 0, err
		}
		return 1, nil
	})
}
