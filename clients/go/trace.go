package comb

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// Trace context travels in message headers, so that one trace spans
// producer → Comb → consumer: Push and Put write the context of their ctx
// (W3C traceparent and tracestate with the usual propagator) into each
// message's headers, Comb stores them with the message, and a consumer
// reads them back with Client.TraceContext and starts its span there.
// Only OpenTelemetry's API is used: the application chooses its SDK and
// exporter, or none.

// WithPropagator sets how the client writes and reads trace context. The
// default is OpenTelemetry's global propagator, otel.GetTextMapPropagator,
// which does nothing until the application sets one (for W3C trace
// context: otel.SetTextMapPropagator(propagation.TraceContext{})).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *Client) { c.prop = p }
}

func (c *Client) propagator() propagation.TextMapPropagator {
	if c.prop != nil {
		return c.prop
	}
	return otel.GetTextMapPropagator()
}

// inject returns h with the trace context of ctx added: h itself when
// there is nothing to add (the default no-op propagator, or a message that
// carries the propagator's headers already, which its producer set on
// purpose), else a copy, so the caller's map is never written. It is nil
// when that leaves no headers.
func (c *Client) inject(ctx context.Context, h nats.Header) nats.Header {
	p := c.propagator()
	fields := p.Fields()
	if len(fields) == 0 {
		return h
	}
	for _, f := range fields {
		if _, has := h[f]; has {
			return h
		}
	}
	out := make(nats.Header, len(h)+len(fields))
	for k, v := range h {
		out[k] = v
	}
	p.Inject(ctx, headerCarrier(out))
	if len(out) == 0 {
		return nil
	}
	return out
}

// TraceContext returns ctx carrying the trace context that d's producer
// sent with it, so that a span started from it continues the producer's
// trace:
//
//	ctx, span := tracer.Start(c.TraceContext(ctx, d), "handle "+d.ID)
//
// A message without trace context returns ctx unchanged.
func (c *Client) TraceContext(ctx context.Context, d Delivery) context.Context {
	if len(d.Headers) == 0 {
		return ctx
	}
	return c.propagator().Extract(ctx, headerCarrier(d.Headers))
}

// headerCarrier lets a propagator read and write NATS headers by their
// exact names: propagation.HeaderCarrier would canonicalize them as HTTP
// does ("Traceparent"), and NATS headers are case-sensitive.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
