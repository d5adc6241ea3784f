package bridge

import (
	"slices"
	"sync"
	"time"

	"github.com/combmq/comb/domain"
)

// wakeLog remembers the partitions the latest wake-ups named, and when
// this bridge received them, so that an ack can tell whether a push's
// wake-up came while its own store call ran.
//
// The race it closes: an ack that ends a lease judges from its snapshot
// whether messages wait behind the lease. A push to the partition that
// commits after that snapshot is not seen, and the push's wake-up can
// reach a waiting pop while the lease still holds the partition, so that
// pop finds nothing and nobody looks again until the retry interval.
// After its commit, the ack asks the log whether a wake-up named the
// partition during the call; if one did, it wakes the group itself. A
// wake-up received after the check came after the ack's commit, and the
// pop it woke sees the partition free.
type wakeLog struct {
	mu      sync.Mutex
	entries [wakeLogSize]wakeLogEntry
	n       uint64 // entries ever added
}

const wakeLogSize = 4096

type wakeLogEntry struct {
	queue     domain.QueueRef
	partition string // "" means every partition
	at        time.Time
}

// add notes that a wake-up named partition of queue ("" for all) now.
func (l *wakeLog) add(queue domain.QueueRef, partition string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries[l.n%wakeLogSize] = wakeLogEntry{queue, partition, at}
	l.n++
}

// each calls fn, newest first, with the partition ("" for every one) of
// each wake-up of queue received at or after since, until fn returns
// true. It reports false when it went through the whole log and the log
// has wrapped: older entries, maybe after since, were lost.
func (l *wakeLog) each(queue domain.QueueRef, since time.Time, fn func(partition string) (stop bool)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := uint64(0); i < min(l.n, wakeLogSize); i++ {
		e := &l.entries[(l.n-1-i)%wakeLogSize]
		if e.at.Before(since) {
			return true
		}
		if e.queue == queue && fn(e.partition) {
			return true
		}
	}
	return l.n < wakeLogSize
}

// namedSince reports whether a wake-up received at or after since named
// partition of queue, or every partition of it. When the log has wrapped
// past since, it cannot tell, and says yes.
func (l *wakeLog) namedSince(queue domain.QueueRef, partition string, since time.Time) bool {
	named := false
	complete := l.each(queue, since, func(p string) bool {
		named = p == partition || p == ""
		return named
	})
	return named || !complete
}

// namedAfter returns the partitions of queue that wake-ups received at or
// after since named; all is true when one named every partition of it, or
// when the log has wrapped past since and cannot tell.
func (l *wakeLog) namedAfter(queue domain.QueueRef, since time.Time) (parts []string, all bool) {
	complete := l.each(queue, since, func(p string) bool {
		if p == "" {
			all = true
		} else if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
		return all
	})
	if all || !complete {
		return nil, true
	}
	return parts, false
}
