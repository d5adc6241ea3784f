package comb_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	comb "github.com/combmq/comb/clients/go"
)

// TestTraceSpansProducerToConsumer: the producer's span context travels
// in the message's headers through Comb, so the consumer's span is its
// child in the same trace, for Push and for Put alike.
func TestTraceSpansProducerToConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(b.ctx) })
	tracer := tp.Tracer("test")
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	c := comb.New(b.nc, comb.WithPropagator(prop))

	ctx, producer := tracer.Start(b.ctx, "produce")
	_, err := c.Push(ctx, "traced", []comb.Message{{Data: []byte(`1`), Headers: nats.Header{"X-Keep": {"yes"}}}})
	require.NoError(t, err)
	_, err = c.Put(ctx, "traced", []byte(`2`), comb.PutOptions{})
	require.NoError(t, err)
	producer.End()

	got, err := c.Pop(b.ctx, "traced", comb.PopOptions{Max: 10, AutoAck: true})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{"yes"}, got[0].Headers["X-Keep"], "the producer's own headers stay")
	for _, d := range got {
		require.Len(t, d.Headers["traceparent"], 1, "W3C trace context, by its exact name")
		_, consumer := tracer.Start(c.TraceContext(b.ctx, d), "consume")
		consumer.End()
	}
	spans := rec.Ended()
	require.Len(t, spans, 3)
	p := spans[0]
	require.Equal(t, "produce", p.Name())
	for _, s := range spans[1:] {
		require.Equal(t, "consume", s.Name())
		require.Equal(t, p.SpanContext().TraceID(), s.SpanContext().TraceID(), "one trace")
		require.Equal(t, p.SpanContext().SpanID(), s.Parent().SpanID(), "the consumer's span is the producer's child")
		require.True(t, s.Parent().IsRemote())
	}

	// Without a span in ctx nothing is added, and a message without trace
	// context gives back ctx as it was.
	_, err = c.Push(b.ctx, "untraced", []comb.Message{{Data: []byte(`1`)}})
	require.NoError(t, err)
	got, err = c.Pop(b.ctx, "untraced", comb.PopOptions{AutoAck: true})
	require.NoError(t, err)
	require.Nil(t, got[0].Headers)
	require.Equal(t, b.ctx, c.TraceContext(b.ctx, got[0]))
}

// TestHeadersAndDelays: headers on Push and Put come back on Pop, Peek and
// in the dead letters; Delay and NotBefore hold a message (and its
// partition's later ones) back.
func TestHeadersAndDelays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	h := nats.Header{"X-Multi": {"a", "b"}, "traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	_, err := c.Push(b.ctx, "hdr", []comb.Message{{Data: []byte(`1`), Headers: h}})
	require.NoError(t, err)
	hp := nats.Header{"X-Put": {"p"}}
	_, err = c.Put(b.ctx, "hdr", []byte(`2`), comb.PutOptions{Partition: comb.DefaultPartition, Delay: time.Millisecond, Headers: hp})
	require.NoError(t, err)
	require.Equal(t, nats.Header{"X-Put": {"p"}}, hp, "the caller's headers are not written")
	page, err := c.Peek(b.ctx, "hdr", comb.PeekQuery{})
	require.NoError(t, err)
	require.Equal(t, h, page.Messages[0].Headers)
	require.Equal(t, nats.Header{"X-Put": {"p"}}, page.Messages[1].Headers)
	got, err := c.Pop(b.ctx, "hdr", comb.PopOptions{Max: 1})
	require.NoError(t, err)
	require.Equal(t, h, got[0].Headers)
	res, err := c.Ack(b.ctx, "hdr", "", []comb.Ack{{Partition: got[0].Partition, Offset: got[0].Offset, Lease: got[0].Lease, Status: comb.AckDead}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err())
	dls, _, err := c.DeadLetters(b.ctx, "hdr", comb.DeadLetterQuery{})
	require.NoError(t, err)
	require.Equal(t, h, dls[0].Headers)

	// A reserved name is refused, naming the field.
	_, err = c.Push(b.ctx, "hdr", []comb.Message{{Data: []byte(`1`), Headers: nats.Header{"Comb-Id": {"x"}}}})
	require.ErrorContains(t, err, `messages[0].headers: "Comb-Id": names starting with "Comb-" are reserved`)

	start := time.Now()
	_, err = c.Push(b.ctx, "later", []comb.Message{{Data: []byte(`1`), Delay: 800 * time.Millisecond}, {Data: []byte(`2`)}})
	require.NoError(t, err)
	_, err = c.Put(b.ctx, "later", []byte(`3`), comb.PutOptions{Partition: "p2", NotBefore: time.Now().Add(800 * time.Millisecond)})
	require.NoError(t, err)
	got, err = c.Pop(b.ctx, "later", comb.PopOptions{Max: 10, Partitions: 2, AutoAck: true})
	require.NoError(t, err)
	if time.Since(start) < 600*time.Millisecond {
		require.Empty(t, got, "held back")
	}
	// A waiting pop is woken when the hold is past, without a push.
	var all []comb.Delivery
	for len(all) < 3 {
		got, err = c.Pop(b.ctx, "later", comb.PopOptions{Max: 10, Partitions: 2, AutoAck: true, Wait: 5 * time.Second})
		require.NoError(t, err)
		require.NotEmpty(t, got, "woken within the wait")
		all = append(all, got...)
	}
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond)
	var defaults []string
	for _, d := range all {
		if d.Partition == comb.DefaultPartition {
			defaults = append(defaults, string(d.Data))
		}
	}
	require.Equal(t, []string{"1", "2"}, defaults, "the later message waited behind the delayed one")
}
