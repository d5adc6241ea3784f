//go:build linux

package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

// TestPrivatePostgresKilled SIGKILLs the postmaster of `comb serve`'s own
// PostgreSQL while a producer puts: Comb restarts it by itself, the
// producer sees only 503s and "spooled" replies meanwhile (never a hang or
// another error), and every put answered "stored" or "spooled", before and
// after, is there to pop.
func TestPrivatePostgresKilled(t *testing.T) {
	b := newBrokerProc(t, "")
	data := b.dataDir()
	b.start()
	nc, err := nats.Connect(b.url, nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	c := comb.New(nc, comb.WithTimeout(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = c.Configure(ctx, "k", comb.ConfigPatch{})
	require.NoError(t, err)

	var (
		mu       sync.Mutex
		stored   []string
		other    []error
		n503     int
		killedAt time.Time
		afterOK  int // stored after the kill
		spooled  int
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := fmt.Sprintf(`"m-%d"`, i)
			res, err := c.Put(ctx, "k", []byte(msg), comb.PutOptions{})
			mu.Lock()
			switch {
			case err == nil:
				stored = append(stored, msg)
				if res.Status == comb.StatusSpooled {
					spooled++
				} else if !killedAt.IsZero() {
					afterOK++
				}
			case errors.Is(err, comb.ErrUnavailable):
				n503++
			default:
				other = append(other, err)
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitFor(t, 20*time.Second, "puts before the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stored) >= 20
	})

	pidFile := filepath.Join(data, "postgres", "postmaster.pid")
	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	require.NoError(t, err)
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	waitFor(t, 60*time.Second, "puts stored again after the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return afterOK >= 20
	})
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, other, "only 503s while PostgreSQL was away")
	t.Logf("acknowledged %d (spooled %d), 503s %d, back within %s", len(stored), spooled, n503, time.Since(killedAt).Round(time.Millisecond))

	got := map[string]int{}
	for len(got) < len(stored) {
		ds, err := c.Pop(ctx, "k", comb.PopOptions{Max: 1000, AutoAck: true})
		require.NoError(t, err)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			got[string(d.Data)]++
		}
	}
	for _, m := range stored {
		require.Equal(t, 1, got[m], "stored %s", m)
	}
	b.interrupt()
}
