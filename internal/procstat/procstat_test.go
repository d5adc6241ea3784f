package procstat

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The test process reads its own figures, and finds a child by its parent.
func TestOwnProcess(t *testing.T) {
	t.Parallel()
	ticks, ok := CPUTicks(os.Getpid())
	require.True(t, ok)
	require.GreaterOrEqual(t, ticks, 0.0)
	require.Positive(t, RSS(os.Getpid()))
	_, ok = CPUTicks(-1)
	require.False(t, ok)

	child := exec.Command("sleep", "5")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	pids := PostgresPIDs(os.Getpid()) // the parent and its children
	require.True(t, slices.Contains(pids, os.Getpid()))
	require.True(t, slices.Contains(pids, child.Process.Pid))
}
