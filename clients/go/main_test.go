package comb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
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
	b := &bundle{ctx: ctx, env: env, nc: env.NC, client: comb.New(env.NC)}
	waitReady(t, b)
	return b
}

// waitReady waits until the service answers this client. bridge.Start
// returns before the server has processed its endpoint subscriptions, so a
// request sent at once from another connection can find no responders.
func waitReady(t *testing.T, b *bundle) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.client.List(b.ctx)
		if !errors.Is(err, nats.ErrNoResponders) {
			require.NoError(t, err)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service never answered: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}
