package comb_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

// bundle is what a test gets from setup: a whole Comb (PostgreSQL schema,
// NATS server, bridge) and a client connected to it over TCP.
type bundle struct {
	ctx    context.Context
	env    *combtest.Env
	nc     *nats.Conn
	client *comb.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	env := combtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &bundle{ctx: ctx, env: env, nc: env.NC, client: comb.New(env.NC)}
}
