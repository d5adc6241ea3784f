package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/broker"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/protocol"
)

func TestMaintenanceCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newOpsEnv(t, combtest.Options{Tune: func(c *broker.Config) { c.SpoolDir, c.SpoolMaxBytes = dir, 1<<20 }})
	require.Contains(t, e.ok("maintenance"), "maintenance off\nspool: 0 records")
	require.Contains(t, e.ok("maintenance", "on"), "maintenance on")
	require.True(t, e.broker.Broker.Bridge().Maintenance())
	var rep protocol.MaintenanceReply
	e.okJSON(&rep, "maintenance", "off")
	require.False(t, rep.Maintenance)
	require.NotNil(t, rep.Spool)
	require.False(t, e.broker.Broker.Bridge().Maintenance())
	r := e.run("maintenance", "maybe")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `"maybe": want on or off`)
}
