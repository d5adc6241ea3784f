package pgcluster

import (
	"context"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Supervise restarts the server whenever it exits without Stop, Kill or
// Restart asking it to (a crash, an OOM kill, someone's kill -9), with
// exponential backoff between failed starts, until ctx ends. It blocks;
// run it in a goroutine and cancel ctx before Stop. Clients of the cluster
// see refused connections meanwhile, and then the same data: a restart
// after a crash replays the WAL.
func (c *Cluster) Supervise(ctx context.Context) {
	for {
		c.mu.Lock()
		s := c.proc
		c.mu.Unlock()
		if s == nil {
			// Stopped on purpose (a Restart in between): look again soon.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.done:
		}
		c.mu.Lock()
		unexpected := c.proc == s
		if unexpected {
			c.proc = nil
		}
		c.mu.Unlock()
		if !unexpected {
			continue
		}
		c.log.Error("postgres exited by itself; restarting it", "pid", s.cmd.Process.Pid, "status", errText(s.err),
			"log", strings.TrimSpace(string(lastLines(c.logSince(s.logFrom), 5))))
		c.restartWithBackoff(ctx)
	}
}

// restartWithBackoff starts the server until it is up or ctx ends: first
// at once, then after 100 ms growing to 30 s between tries.
func (c *Cluster) restartWithBackoff(ctx context.Context) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 30 * time.Second
	b.MaxElapsedTime = 0 // until ctx ends
	began := time.Now()
	tries := 0
	err := backoff.RetryNotify(func() error {
		tries++
		return c.Start(ctx)
	}, backoff.WithContext(b, ctx), func(err error, next time.Duration) {
		c.log.Warn("postgres restart failed; trying again", "err", err, "in", next.Round(time.Millisecond))
	})
	if err != nil {
		return // ctx ended
	}
	c.log.Info("postgres restarted", "tries", tries, "after", time.Since(began).Round(time.Millisecond), "port", c.port)
}

func errText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}
