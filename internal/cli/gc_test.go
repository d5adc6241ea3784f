package cli

import (
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/broker"
)

// applyGC sets the collector's target and memory limit from the
// configuration, the default target when none is set, and leaves both to
// GOGC and GOMEMLIMIT when the environment has them. Not parallel: the
// collector's settings are the process's.
func TestApplyGC(t *testing.T) {
	prevGC, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prevGC)
		debug.SetMemoryLimit(prevLimit)
	})
	log := slog.New(slog.DiscardHandler)
	none := func(string) string { return "" }
	limit := debug.SetMemoryLimit(-1) // -1 reads it

	applyGC(broker.Config{GCPercent: 250, MemoryLimit: 1 << 30}, none, log)
	require.Equal(t, 250, debug.SetGCPercent(100))
	require.EqualValues(t, 1<<30, debug.SetMemoryLimit(limit))

	applyGC(broker.Config{}, none, log)
	require.Equal(t, broker.DefaultGCPercent, debug.SetGCPercent(100), "zero is the default")
	require.Equal(t, limit, debug.SetMemoryLimit(-1), "no limit configured, none set")

	env := map[string]string{"GOGC": "150", "GOMEMLIMIT": "2GiB"}
	debug.SetGCPercent(150) // as the runtime did at start, reading GOGC
	applyGC(broker.Config{GCPercent: 250, MemoryLimit: 1 << 30}, func(k string) string { return env[k] }, log)
	require.Equal(t, 150, debug.SetGCPercent(100), "GOGC wins")
	require.Equal(t, limit, debug.SetMemoryLimit(-1), "GOMEMLIMIT wins")
}
