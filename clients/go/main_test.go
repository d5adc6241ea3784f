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

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(m).With(startExampleComb))
}

// nc is the connection the examples use: to a Comb of their own, shared by
// all of them, which runs from before the first test to after the last.
// Each example uses its own queue, so they do not see each other.
var nc *nats.Conn

// startExampleComb is the pgtest fixture that starts the examples' Comb;
// pgtest stops it after the last example, before goleak looks for leaks.
func startExampleComb() (stop func() error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, stop, err := combtest.Open(ctx, combtest.Options{Name: "examples"})
	if err != nil {
		return nil, err
	}
	nc = env.NC
	return stop, nil
}

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
