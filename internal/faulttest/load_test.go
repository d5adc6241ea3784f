//go:build linux

package faulttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
)

// idLoad is a load of producers that push batches of messages with
// producer ids into a queue with a dedup window, sending a batch again,
// same ids, after a 503 or no answer, until it is answered. It records
// every answer and when each push succeeded, so a test can verify every
// message and measure how long pushes failed.
type idLoad struct {
	c          *comb.Client
	queue      string
	producers  int
	batch      int
	partitions int
	pause      time.Duration // between one producer's pushes, to spare the CPU

	mu       sync.Mutex
	answers  map[string][]pushAnswer // id -> the answer of every attempt that got one
	oks      []time.Time             // when each push request was answered
	n503     atomic.Int64            // attempts answered 503
	nLost    atomic.Int64            // attempts without an answer (timeout, no responders)
	stop     chan struct{}
	done     chan struct{}
	haltOnce sync.Once
}

type pushAnswer struct {
	partition string
	offset    int64
	status    string
}

// requireStoredOnce checks answers (producer id -> every answer its pushes
// got): every answer of an id is stored or duplicate and names one
// partition and offset, and no two ids share one. It returns how many
// answers were duplicates.
func requireStoredOnce(t *testing.T, answers map[string][]pushAnswer) (duplicates int) {
	t.Helper()
	owner := map[string]string{} // "partition/offset" -> id
	for id, as := range answers {
		for _, a := range as {
			require.Contains(t, []string{comb.StatusStored, comb.StatusDuplicate}, a.status, id)
			require.Equal(t, as[0].partition, a.partition, id)
			require.Equal(t, as[0].offset, a.offset, "id %s stored twice", id)
			if a.status == comb.StatusDuplicate {
				duplicates++
			}
		}
		key := as[0].partition + "/" + strconv.FormatInt(as[0].offset, 10)
		require.Empty(t, owner[key], "offset %s given to %s and %s", key, owner[key], id)
		owner[key] = id
	}
	return duplicates
}

func newIDLoad(c *comb.Client, queue string) *idLoad {
	return &idLoad{c: c, queue: queue, producers: 4, batch: 5, partitions: 4, pause: 5 * time.Millisecond,
		answers: map[string][]pushAnswer{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// start runs the producers until halt. A producer that gets an error
// other than 503 or no answer reports it through t and stops.
func (l *idLoad) start(ctx context.Context, t *testing.T) {
	t.Cleanup(l.halt) // producers never outlive the test, whatever fails
	var wg sync.WaitGroup
	for p := range l.producers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-time.After(l.pause):
				}
				msgs := make([]comb.Message, l.batch)
				for j := range msgs {
					id := fmt.Sprintf("%d-%d-%d", p, i, j)
					msgs[j] = comb.Message{Partition: "p" + strconv.Itoa((p+i+j)%l.partitions), ID: id,
						Data: []byte(strconv.Quote(id))}
				}
				res, err := l.push(ctx, msgs)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("producer %d, push %d: %v", p, i, err)
					}
					return
				}
				l.mu.Lock()
				l.oks = append(l.oks, time.Now())
				for j, r := range res {
					l.answers[msgs[j].ID] = append(l.answers[msgs[j].ID], pushAnswer{r.Partition, r.Offset, r.Status})
				}
				l.mu.Unlock()
			}
		})
	}
	go func() { wg.Wait(); close(l.done) }()
}

// push sends msgs until they are answered: again after a 503 or no
// answer, with backoff (20 ms growing to 200 ms) for at most a minute.
func (l *idLoad) push(ctx context.Context, msgs []comb.Message) ([]comb.PushResult, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 20 * time.Millisecond
	bo.MaxInterval = 200 * time.Millisecond
	bo.MaxElapsedTime = time.Minute
	return backoff.RetryWithData(func() ([]comb.PushResult, error) {
		res, err := l.c.Push(ctx, l.queue, msgs)
		switch {
		case err == nil:
			return res, nil
		case errors.Is(err, comb.ErrUnavailable):
			l.n503.Add(1)
			return nil, err
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
			errors.Is(err, nats.ErrConnectionReconnecting):
			l.nLost.Add(1)
			return nil, err
		}
		return nil, backoff.Permanent(err)
	}, backoff.WithContext(bo, ctx))
}

// halt stops the producers after the pushes they are in and waits for
// them.
// halt stops the producers and waits for them; it is safe to call twice.
func (l *idLoad) halt() {
	l.haltOnce.Do(func() { close(l.stop) })
	<-l.done
}

// okCount returns how many push requests have succeeded.
func (l *idLoad) okCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.oks)
}

// okSince returns how many push requests have succeeded after t.
func (l *idLoad) okSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ok := range l.oks {
		if ok.After(t) {
			n++
		}
	}
	return n
}

// outage returns the longest time without a successful push around at:
// from the last success before it to the first after it.
func (l *idLoad) outage(at time.Time) (last, first time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	oks := slices.Clone(l.oks)
	slices.SortFunc(oks, func(a, b time.Time) int { return a.Compare(b) })
	for _, ok := range oks {
		if !ok.After(at) {
			last = ok
		} else if first.IsZero() {
			first = ok
		}
	}
	return last, first
}

// verify checks, after halt, that the queue holds every id answered
// exactly once, at the partition and offset its first answer gave, that
// every later answer to the same id agrees (a duplicate), and that the
// queue holds nothing else. It drains the queue to do so.
func (l *idLoad) verify(ctx context.Context, t *testing.T) (messages, duplicates int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, as := range l.answers {
		for _, a := range as {
			require.Contains(t, []string{comb.StatusStored, comb.StatusDuplicate}, a.status, id)
			require.Equal(t, as[0].partition, a.partition, id)
			require.Equal(t, as[0].offset, a.offset, "id %s answered with two offsets", id)
			if a.status == comb.StatusDuplicate {
				duplicates++
			}
		}
	}
	info, err := l.c.Info(ctx, l.queue)
	require.NoError(t, err)
	require.EqualValues(t, len(l.answers), info.Messages, "the queue holds each id answered, once")

	got := map[string]pushAnswer{}
	for range 10000 { // bounded: a pop returns up to 1000
		ds, err := l.c.Pop(ctx, l.queue, comb.PopOptions{Max: 1000, Partitions: l.partitions, AutoAck: true})
		require.NoError(t, err)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			_, seen := got[d.ID]
			require.False(t, seen, "id %s delivered twice", d.ID)
			require.Equal(t, strconv.Quote(d.ID), string(d.Data), d.ID)
			got[d.ID] = pushAnswer{d.Partition, d.Offset, ""}
		}
	}
	require.Len(t, got, len(l.answers))
	for id, as := range l.answers {
		g, ok := got[id]
		require.True(t, ok, "id %s was acknowledged %s and is gone", id, as[0].status)
		require.Equal(t, as[0].partition, g.partition, id)
		require.Equal(t, as[0].offset, g.offset, "id %s is not at the offset acknowledged", id)
	}
	return len(l.answers), duplicates
}

var httpURLRe = regexp.MustCompile(`msg="http listening" url=(\S+)/`)

// httpURL returns the HTTP listener of the broker's current run, from its
// log.
func (b *brokerProc) httpURL() string {
	b.t.Helper()
	out, err := os.ReadFile(b.logs[len(b.logs)-1])
	require.NoError(b.t, err)
	m := httpURLRe.FindSubmatch(out)
	require.NotNil(b.t, m, "no http listener in the log")
	return string(m[1])
}

// readyz returns /readyz's status code.
func readyz(t *testing.T, base string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// logCount counts occurrences of s in a file that may not exist yet.
func logCount(path, s string) int {
	out, _ := os.ReadFile(path)
	return bytes.Count(out, []byte(s))
}
