package procstat

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

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

// SelfCPU grows with the work the process does, and agrees with /proc.
func TestSelfCPU(t *testing.T) {
	before := SelfCPU()
	require.Positive(t, before)
	grew := false
	for start := time.Now(); time.Since(start) < 5*time.Second; {
		if SelfCPU()-before >= 20*time.Millisecond {
			grew = true
			break
		}
	}
	require.True(t, grew, "5 s of a busy loop used 20 ms of CPU")
	now := SelfCPU()
	ticks, ok := CPUTicks(os.Getpid())
	require.True(t, ok)
	require.InDelta(t, now.Seconds(), ticks/ClockTicks, 0.1, "the kernel's two counts of it")
}
