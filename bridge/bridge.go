// Package bridge owns Comb's NATS side: the micro service "comb", one
// endpoint per verb, request decoding and validation, and the coalescers
// that turn many concurrent requests into few PostgreSQL transactions.
package bridge

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/combmq/comb/store"
)

// Config tunes a Bridge. The zero value is usable.
type Config struct {
	// Prefix is the first subject token; "" means "comb".
	Prefix string
}

// Bridge serves the Comb protocol on a NATS connection.
type Bridge struct {
	nc  *nats.Conn
	st  *store.Store
	cfg Config
	log *slog.Logger
}

// New returns a bridge serving st on nc. Start it with Start.
func New(nc *nats.Conn, st *store.Store, cfg Config, log *slog.Logger) (*Bridge, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Bridge{nc: nc, st: st, cfg: cfg, log: log}, nil
}

// Start registers the micro service and its endpoints.
func (b *Bridge) Start(ctx context.Context) error {
	return errors.New("bridge: not implemented yet")
}

// Stop drains: it stops taking requests, answers those in flight, then
// returns. It is safe to call twice.
func (b *Bridge) Stop() {}
