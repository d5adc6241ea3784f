package comb_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/internal/testcerts"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(m).With(startExampleComb).With(startSecureComb))
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

// secureURL and caFile are a second Comb of the examples', with TLS and a
// users list: user app, password app-secret.
var secureURL, caFile string

// startSecureComb starts that Comb; its certificates live in a temporary
// directory that stop removes.
func startSecureComb() (stop func() error, err error) {
	dir, err := os.MkdirTemp("", "comb-example-certs-")
	if err != nil {
		return nil, err
	}
	certs, err := testcerts.Write(dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	opts := &server.Options{}
	if err := opts.ProcessConfigString(fmt.Sprintf(`
tls { cert_file: %q, key_file: %q }
authorization { users: [ {user: app, password: app-secret} ] }`, certs.Server, certs.ServerKey)); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, stopComb, err := combtest.Open(ctx, combtest.Options{Name: "examples_secure",
		NATS:          embeddednats.Config{Options: opts},
		ClientOptions: []nats.Option{nats.UserInfo("app", "app-secret"), nats.RootCAs(certs.CA)}})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	secureURL, caFile = env.URL, certs.CA
	return func() error { return errors.Join(stopComb(), os.RemoveAll(dir)) }, nil
}
