//go:build unix

package freeport

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A port another live process picked is not picked here, and is again
// once that process is gone: the child below reserves a port, the
// parent finds it taken, the child exits, the parent can take it.
func TestReservedAcrossProcesses(t *testing.T) {
	if port := os.Getenv("FREEPORT_TEST_CHILD"); port != "" {
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		require.True(t, reserve(p))
		fmt.Println("reserved")
		_, _ = io.ReadAll(os.Stdin) // hold it until the parent closes stdin
		return
	}
	p := 10000 + rand.IntN(5000) // well below where Loopback picks, so no other picker races this test
	cmd := exec.Command(os.Args[0], "-test.run=^TestReservedAcrossProcesses$")
	cmd.Env = append(os.Environ(), "FREEPORT_TEST_CHILD="+strconv.Itoa(p))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "reserved\n", line)

	require.False(t, reserve(p), "port %d is reserved by a live process", p)
	require.NoError(t, stdin.Close())
	_, _ = io.Copy(io.Discard, stdout)
	require.NoError(t, cmd.Wait())
	require.True(t, reserve(p), "port %d is free again once its process is gone", p)
}

// Every port Loopback picks stays locked while this process lives.
func TestLoopbackReserves(t *testing.T) {
	for range 20 {
		p, err := Loopback()
		require.NoError(t, err)
		f, err := os.Open(filepath.Join(os.TempDir(), "comb-freeport", strconv.Itoa(p)))
		require.NoError(t, err)
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		require.NoError(t, f.Close())
		require.ErrorIs(t, err, syscall.EWOULDBLOCK, "port %d is locked by its picker", p)
	}
}
