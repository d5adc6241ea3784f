package loadtest_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/testcerts"
	"github.com/combmq/comb/loadtest"
)

// TestAuthenticatedRun: the loader reaches a broker with TLS and users
// through URL credentials and -tls-ca, runs the JetStream target with the
// same credentials, and never prints the password.
func TestAuthenticatedRun(t *testing.T) {
	t.Parallel()
	certs := testcerts.New(t, t.TempDir())
	opts := &server.Options{}
	require.NoError(t, opts.ProcessConfigString(fmt.Sprintf(`
tls { cert_file: %q, key_file: %q }
authorization { users: [ {user: loader, password: "s3cret-pw"} ] }`, certs.Server, certs.ServerKey)))
	env := combtest.StartWith(t, combtest.Options{
		NATS:          embeddednats.Config{Options: opts},
		ClientOptions: []nats.Option{nats.UserInfo("loader", "s3cret-pw"), nats.RootCAs(certs.CA)},
	})
	addr := env.Server.NATS().Addr().(*net.TCPAddr)

	cfg := loadtest.DefaultConfig()
	cfg.Targets = []loadtest.Target{loadtest.TargetComb, loadtest.TargetJetStream}
	cfg.NATSURL = fmt.Sprintf("nats://loader:s3cret-pw@127.0.0.1:%d", addr.Port)
	cfg.TLSCA = certs.CA
	cfg.Queue = "auth"
	cfg.Rate = 200
	cfg.PushBatch = 20
	cfg.Partitions = 2
	cfg.Consumers = 2
	cfg.Pacers = 1
	cfg.Conns = 1
	cfg.Duration = 2 * time.Second
	cfg.Interval = time.Second
	cfg.Drain = 20 * time.Second
	cfg.Verify = true
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	sum, err := loadtest.Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(sum.Runs), 2, "comb and jetstream")
	for _, r := range sum.Runs {
		require.Zero(t, r.Verdict.Missing)
		require.Positive(t, r.Verdict.Stored)
	}
	require.NotContains(t, out.String(), "s3cret-pw")
	require.Contains(t, out.String(), "nats://loader:xxxxx@127.0.0.1")

	// Without the CA, or with a wrong password, the loader cannot connect;
	// the error does not show the password either.
	for _, c := range []func(*loadtest.Config){
		func(c *loadtest.Config) { c.TLSCA = "" },
		func(c *loadtest.Config) { c.NATSURL = fmt.Sprintf("nats://loader:wrong-pw@127.0.0.1:%d", addr.Port) },
	} {
		bad := cfg
		bad.Targets = []loadtest.Target{loadtest.TargetComb}
		c(&bad)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := loadtest.Run(ctx, bad, &bytes.Buffer{})
		cancel()
		require.Error(t, err)
		require.NotContains(t, err.Error(), "pw@")
	}
}
