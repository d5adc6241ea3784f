package loadtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/protocol"
)

// TestConfigValidateProtocolBounds checks that the loader refuses, before
// a run, what the broker would refuse, with the protocol's bounds.
func TestConfigValidateProtocolBounds(t *testing.T) {
	t.Parallel()
	def := DefaultConfig()
	require.NoError(t, def.validate())
	require.Equal(t, protocol.DefaultPopMax, def.PopBatch, "pops as many as the broker does by default")
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		error string
	}{
		{"queue", func(c *Config) { c.Queue = "bad$name" }, `queue: queue name "bad$name" has character '$' at byte 3`},
		{"queue empty", func(c *Config) { c.Queue = "" }, "queue: queue name is empty"},
		{"queue token", func(c *Config) { c.Queue = "a..b" }, "empty token"},
		{"push batch", func(c *Config) { c.PushBatch = protocol.MaxPushMessages + 1 }, "push-batch 10001: want 1 to 10000"},
		{"pop batch", func(c *Config) { c.PopBatch = protocol.MaxPopMessages + 1 }, "pop-batch 10001: want 1 to 10000"},
		{"pop partitions", func(c *Config) { c.PopPartitions = protocol.MaxPopPartitions + 1 }, "pop-partitions 1001: want 1 to 1000"},
		{"lease", func(c *Config) { c.Lease = 99 * time.Millisecond }, "lease 99ms: want >= 100ms"},
		{"dedup window", func(c *Config) { c.DedupWindow = (protocol.MaxDedupWindowS + 1) * time.Second }, "dedup-window 168h0m1s"},
		{"ack-next with JetStream", func(c *Config) { c.AckNext, c.Targets = true, []Target{TargetComb, TargetJetStream} }, "ack-next: Comb only"},
		{"ack-next with clients/go", func(c *Config) { c.AckNext, c.Client = true, ClientGo }, "ack-next: Comb only, with manual-ack, the raw client"},
		{"ack-next with auto_ack", func(c *Config) { c.AckNext, c.ManualAck = true, false }, "ack-next"},
		{"ack-next with a pipeline", func(c *Config) { c.AckNext, c.Pipeline = true, true }, "ack-next"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		require.ErrorContains(t, c.validate(), tc.error, tc.name)
	}
	c := DefaultConfig()
	c.Queue = "billing.invoices-2_x"
	require.NoError(t, c.validate())
}

// A cluster's brokers are a comma-separated list, as nats.Connect takes
// them; every element must be a URL.
func TestConfigNATSServerList(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.NATSURL = "nats://127.0.0.1:29001,nats://127.0.0.1:29002, nats://tok@127.0.0.1:29003"
	require.NoError(t, c.validate())
	require.Equal(t, "nats://127.0.0.1:29001,nats://127.0.0.1:29002,nats://xxxxx@127.0.0.1:29003", c.RedactedURL())
	for _, bad := range []string{"nats://127.0.0.1:29001,", "nats://127.0.0.1:29001,127.0.0.1:29002", "nats://127.0.0.1:29001,,nats://b:1"} {
		c.NATSURL = bad
		require.ErrorContains(t, c.validate(), "or several separated by commas", bad)
	}
}
