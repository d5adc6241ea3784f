package web

import (
	"sync"
	"time"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// point is one queue's figures in one sample. Rates are per second since
// the previous sample; ok is false when there was none for the queue.
type point struct {
	depth          int64
	push, pop, ack float64
	ok             bool
}

type sample struct {
	at     time.Time
	points map[domain.QueueRef]point
}

// ring keeps the last samples of every sampled queue. Memory is bounded by
// its size times the queues sampled (Options.MaxQueues): four numbers per
// queue per sample; the totals of only the latest sample are kept, to
// derive the next rates.
type ring struct {
	mu      sync.Mutex
	buf     []sample // oldest first once full: buf[next:] then buf[:next]
	next    int
	full    bool
	prev    map[domain.QueueRef]store.QueueTotals
	prevAt  time.Time
	lastErr string
	errAt   time.Time
}

func newRing(size int) *ring { return &ring{buf: make([]sample, size)} }

// add records a reading of totals taken at now.
func (r *ring) add(now time.Time, totals []store.QueueTotals) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := sample{at: now, points: make(map[domain.QueueRef]point, len(totals))}
	cur := make(map[domain.QueueRef]store.QueueTotals, len(totals))
	dt := now.Sub(r.prevAt).Seconds()
	for _, qt := range totals {
		cur[qt.Queue] = qt
		pt := point{depth: depthOf(qt)}
		if old, ok := r.prev[qt.Queue]; ok && dt > 0 {
			pt.ok = true
			pt.push = grown(old.Pushed, qt.Pushed) / dt
			// Only groups in both readings count: a group created meanwhile
			// starts at the retained offsets, not at zero.
			was := make(map[string]store.GroupTotals, len(old.Groups))
			for _, g := range old.Groups {
				was[g.Name] = g
			}
			for _, g := range qt.Groups {
				if o, ok := was[g.Name]; ok {
					pt.pop += grown(o.Popped, g.Popped) / dt
					pt.ack += grown(o.Settled, g.Settled) / dt
				}
			}
		}
		s.points[qt.Queue] = pt
	}
	r.prev, r.prevAt = cur, now
	r.lastErr = ""
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// depthOf is a queue's backlog: the largest pending of its groups, or its
// retained messages while no group reads it.
func depthOf(qt store.QueueTotals) int64 {
	if len(qt.Groups) == 0 {
		return qt.Messages
	}
	var d int64
	for _, g := range qt.Groups {
		d = max(d, g.Pending)
	}
	return d
}

// grown is how much a total grew; a total that went back (a seek, a
// queue deleted and created again) counts as no growth.
func grown(from, to int64) float64 { return float64(max(to-from, 0)) }

// fail records a sample that could not be read. The next good sample
// derives its rates from the last good one.
func (r *ring) fail(now time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr, r.errAt = err.Error(), now
}

// samples returns the samples oldest first.
func (r *ring) samples() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sample
	if r.full {
		out = append(out, r.buf[r.next:]...)
	}
	return append(out, r.buf[:r.next]...)
}

// lastError is the error of the latest sample, if it failed.
func (r *ring) lastError() (string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr, r.errAt
}
