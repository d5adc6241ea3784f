package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/metrics"
)

// BenchmarkObserver is what the bridge's workers pay per push transaction
// of 400 messages, its pop reply and its ack, and per answered request.
func BenchmarkObserver(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	q := domain.Global("bench")
	msgs := make([]domain.PushMessage, 400)
	results := make([]domain.PushResult, 400)
	popped := make([]domain.Message, 400)
	for i := range msgs {
		msgs[i] = domain.PushMessage{Partition: "p", Data: make([]byte, 100)}
		results[i] = domain.PushResult{Partition: "p", Offset: int64(i), Status: domain.Stored}
		popped[i] = domain.Message{Partition: "p", Offset: int64(i), Attempt: 1, Data: msgs[i].Data}
	}
	pushes := []domain.PushParams{{Queue: q, Messages: msgs}}
	pushOuts := []domain.PushOutcome{{Results: results}}
	acks := []domain.AckParams{{Queue: q, Group: "g", Acks: []domain.Ack{{Partition: "p", Offset: 399}}}}
	ackOuts := []domain.AckOutcome{{Results: []domain.AckResult{{OK: true, Settled: 400}}}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		m.PushTx(time.Millisecond, pushes, pushOuts)
		m.Answered("", "push", false, time.Millisecond)
		m.PopTx(time.Millisecond, q, 400)
		m.Popped(q, popped)
		m.Answered("", "pop", false, time.Millisecond)
		m.AckTx(time.Millisecond, acks, ackOuts)
		m.Answered("", "ack", false, time.Millisecond)
	}
}
