// Package freeport picks free loopback ports for servers that must be
// told their port before they start: a PostgreSQL cluster, a NATS route
// or client listener a restarted process must find again.
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// minPicked keeps picked ports clear of the well-known and the usual
// fixed ones (PostgreSQL's 5432, Comb's 5433, 8480, NATS's 4222).
const minPicked = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports this process was given, never given twice
)

// Loopback returns a port free on 127.0.0.1 now, below the kernel's
// ephemeral range when there is room for one there, any free port
// otherwise. Below that range no listener asking for port 0 and no
// outgoing connection is ever given it, so a server stopped for a while (a
// fault test's outage, a supervised restart) finds its port free again
// and nobody's server answers on it meanwhile; a port picked with
// "127.0.0.1:0" and closed, by contrast, is the next one the kernel hands
// to whoever asks for port 0 (once a NATS client listener, whose route
// listener then failed to bind). No port is returned twice in one process,
// nor, where file locks work, to two live processes on this machine: the
// picker holds a lock on a file named after the port until it exits, so
// a port left unbound for a moment (a broker between SIGTERM and its
// restart) is not picked by a test package running beside it, or by a
// broker child choosing its PostgreSQL's port (once another process bound
// a broker's route port in the 1.5 s it was down in a rolling restart).
func Loopback() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if lo, ok := ephemeralLow(); ok && lo > 2*minPicked {
		for range 200 {
			p := lo/2 + rand.IntN(lo/2)
			if !handed[p] && free(p) && reserve(p) {
				handed[p] = true
				return p, nil
			}
		}
	}
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handed[p] {
			handed[p] = true
			return p, nil
		}
	}
	return 0, &net.AddrError{Err: "no free port found", Addr: "127.0.0.1"}
}

// LoopbackAddr is Loopback as "127.0.0.1:port".
func LoopbackAddr() (string, error) {
	p, err := Loopback()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

func free(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil
}
