package loadtest

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// A push log (Config.PushLog) takes a run's latency apart push by push:
// for every push request, when it was due, sent and answered, and when the
// first and the last of its messages reached a consumer. A run's e2e p99
// at ten pushes a second is its second-slowest push; the log says whether
// that push was sent late (the loader), answered late (the broker and
// PostgreSQL) or delivered late after its answer (the hand-off or the
// pop). It is written as pushes.csv into the run's -out directory.
//
// Every delivered message takes the log's lock once, so it is a tool for
// light and moderate loads, not for the closed loop's maximum.

// pushKey names a push request: its messages' producer and partition and
// the sequence number of its first message, which every message of it
// carries (header.Seq - header.Index).
type pushKey struct {
	producer, partition uint32
	first               uint64
}

// pushTimes are one push request's times, in Unix nanoseconds; 0 is not
// seen.
type pushTimes struct {
	due, sent, answered int64
	firstDelivered      int64
	lastDelivered       int64
	messages            int
	delivered           int // deliveries, redeliveries included
	failed              bool
}

// maxLoggedPushes bounds a push log's memory: the pushes after it are
// counted, not kept.
const maxLoggedPushes = 1 << 20

type pushLog struct {
	mu      sync.Mutex
	pushes  map[pushKey]*pushTimes
	dropped int64
}

func newPushLog() *pushLog { return &pushLog{pushes: map[pushKey]*pushTimes{}} }

// entryLocked returns k's times, made on first sight; nil past the bound.
func (l *pushLog) entryLocked(k pushKey) *pushTimes {
	t := l.pushes[k]
	if t == nil {
		if len(l.pushes) >= maxLoggedPushes {
			l.dropped++
			return nil
		}
		t = &pushTimes{}
		l.pushes[k] = t
	}
	return t
}

// pushed records a push request of n messages, due at due, sent at sent
// and answered at answered, failed or not.
func (l *pushLog) pushed(k pushKey, due, sent, answered time.Time, n int, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.entryLocked(k)
	if t == nil {
		return
	}
	t.due, t.sent, t.answered = due.UnixNano(), sent.UnixNano(), answered.UnixNano()
	t.messages, t.failed = n, failed
}

// delivered records that a message of k reached a consumer at at (Unix
// nanoseconds). A consumer may see it before the producer sees the answer.
func (l *pushLog) delivered(k pushKey, at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.entryLocked(k)
	if t == nil {
		return
	}
	if t.firstDelivered == 0 || at < t.firstDelivered {
		t.firstDelivered = at
	}
	t.lastDelivered = max(t.lastDelivered, at)
	t.delivered++
}

// pushLogHeader is pushes.csv's first row. Times are milliseconds: due
// from the run's start, the others from when the push was due, so that
// e2e_last_ms is the slowest e2e latency of the push's messages, as the
// run's percentiles count it.
var pushLogHeader = []string{"due_ms", "producer", "partition", "first_seq", "messages", "failed",
	"sent_ms", "answered_ms", "e2e_first_ms", "e2e_last_ms", "deliveries"}

// write writes the log to path, a row a push in the order they were due;
// start is the run's start. Columns of what was not seen are empty.
func (l *pushLog) write(path string, start time.Time) error {
	type row struct {
		k pushKey
		t pushTimes
	}
	l.mu.Lock()
	rows := make([]row, 0, len(l.pushes))
	for k, t := range l.pushes {
		rows = append(rows, row{k, *t})
	}
	l.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.t.due, b.t.due), cmp.Compare(a.k.producer, b.k.producer),
			cmp.Compare(a.k.partition, b.k.partition), cmp.Compare(a.k.first, b.k.first))
	})

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("push log: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write(pushLogHeader)
	s := start.UnixNano()
	since := func(from, t int64) string { // milliseconds; empty when either was not seen
		if t == 0 || from == 0 {
			return ""
		}
		return fmtFloat(float64(t-from) / 1e6)
	}
	for _, r := range rows {
		k, t := r.k, r.t
		_ = w.Write([]string{since(s, t.due), itoa(int64(k.producer)), itoa(int64(k.partition)),
			strconv.FormatUint(k.first, 10), itoa(int64(t.messages)), strconv.FormatBool(t.failed),
			since(t.due, t.sent), since(t.due, t.answered), since(t.due, t.firstDelivered),
			since(t.due, t.lastDelivered), itoa(int64(t.delivered))})
	}
	w.Flush()
	err = w.Error()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("push log: %w", err)
	}
	return nil
}

// droppedPushes is how many pushes came past maxLoggedPushes.
func (l *pushLog) droppedPushes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}
