// Package testenv is what tests of several packages need from the machine
// and from NATS, without a broker: the nats CLI, a log buffer safe for
// concurrent writers, and a client connection that reports the server's
// permission violations.
package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// NATSCLI returns the path of the nats CLI, or skips the test.
func NATSCLI(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, "go", "bin", "nats")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("nats CLI not installed (go install github.com/nats-io/natscli/nats@v0.5.0)")
	return ""
}

// Buffer is a bytes.Buffer that goroutines may write while a test reads
// it: a log destination or a child process's output.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Watched is a client connection whose asynchronous errors, such as the
// server's permission violations, arrive on Errs.
type Watched struct {
	*nats.Conn
	Errs chan error
}

// Dial connects to url with opts, without reconnecting; the connection
// closes when the test ends.
func Dial(t testing.TB, url string, opts ...nats.Option) (*Watched, error) {
	t.Helper()
	w := &Watched{Errs: make(chan error, 64)}
	opts = append([]nats.Option{nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case w.Errs <- err:
		default:
		}
	})}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	w.Conn = nc
	return w, nil
}

// MustDial is Dial that fails the test when the connection fails.
func MustDial(t testing.TB, url string, opts ...nats.Option) *Watched {
	t.Helper()
	w, err := Dial(t, url, opts...)
	require.NoError(t, err)
	return w
}

// Violation waits for the server to refuse what the client just did.
func (w *Watched) Violation(t testing.TB, what string) {
	t.Helper()
	_ = w.Flush()
	select {
	case err := <-w.Errs:
		require.ErrorContains(t, err, "Permissions Violation", what)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no permission violation", what)
	}
}

// Allowed checks that the server took what the client just did: no
// asynchronous error came back by the end of a round trip.
func (w *Watched) Allowed(t testing.TB, what string) {
	t.Helper()
	require.NoError(t, w.Flush(), what)
	select {
	case err := <-w.Errs:
		t.Fatalf("%s: %v", what, err)
	default:
	}
}
