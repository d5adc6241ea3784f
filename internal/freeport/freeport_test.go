package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Picked ports are free, below the ephemeral range when it leaves room,
// and never handed out twice, even when the kernel would give the same
// one again.
func TestLoopback(t *testing.T) {
	lo, ok := ephemeralLow()
	seen := map[int]bool{}
	for range 200 {
		p, err := Loopback()
		require.NoError(t, err)
		require.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		if ok && lo > 2*minPicked {
			require.GreaterOrEqual(t, p, lo/2)
			require.Less(t, p, lo, "below the ephemeral range")
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err, "port %d is free", p)
		require.NoError(t, l.Close())
	}
	addr, err := LoopbackAddr()
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
}
