package loadtest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// counters are the live figures of a run, updated by producers and
// consumers and read by the ticker.
type counters struct {
	offered      atomic.Int64 // messages due by the schedule (or sent, closed loop)
	pushed       atomic.Int64 // messages answered stored
	shed         atomic.Int64 // messages of requests not sent: over MaxInflight
	pushReqs     atomic.Int64 // push requests answered, stored or failed
	pushFailReqs atomic.Int64 // push requests that failed
	pushFailMsgs atomic.Int64
	pushDups     atomic.Int64 // messages answered duplicate
	popped       atomic.Int64 // deliveries, redeliveries and foreign included
	popReqs      atomic.Int64
	popFailReqs  atomic.Int64
	acked        atomic.Int64 // messages settled by accepted acks (auto-acked included)
	ackReqs      atomic.Int64
	ackFailReqs  atomic.Int64 // ack requests that failed or had a refused ack
	pushRTT      atomic.Int64 // sum of push round trips, ns
	ackRTT       atomic.Int64 // sum of ack round trips, ns
	ackTimed     atomic.Int64 // ack round trips summed in ackRTT
	pushInflight atomic.Int64
	ackInflight  atomic.Int64
}

// Counts is a snapshot of the counters.
type Counts struct {
	Offered      int64 `json:"offered"`
	Pushed       int64 `json:"pushed"`
	Shed         int64 `json:"shed"`
	PushRequests int64 `json:"push_requests"`
	PushFailed   int64 `json:"push_failed_requests"`
	PushFailMsgs int64 `json:"push_failed_messages"`
	// PushDuplicates counts messages answered "duplicate": with ids unique
	// to every message (-dedup-window) it should stay 0.
	PushDuplicates int64 `json:"push_duplicates"`
	Popped         int64 `json:"popped"`
	PopRequests    int64 `json:"pop_requests"`
	PopFailed      int64 `json:"pop_failed_requests"`
	Acked          int64 `json:"acked"`
	AckRequests    int64 `json:"ack_requests"`
	AckFailed      int64 `json:"ack_failed_requests"`
	// PushRTTNanos sums the push round trips; AckRTTNanos sums AckTimed
	// ack round trips.
	PushRTTNanos int64 `json:"push_rtt_ns_sum"`
	AckRTTNanos  int64 `json:"ack_rtt_ns_sum"`
	AckTimed     int64 `json:"ack_timed"`
}

func (c *counters) snapshot() Counts {
	return Counts{
		Offered:        c.offered.Load(),
		Pushed:         c.pushed.Load(),
		Shed:           c.shed.Load(),
		PushRequests:   c.pushReqs.Load(),
		PushFailed:     c.pushFailReqs.Load(),
		PushFailMsgs:   c.pushFailMsgs.Load(),
		PushDuplicates: c.pushDups.Load(),
		Popped:         c.popped.Load(),
		PopRequests:    c.popReqs.Load(),
		PopFailed:      c.popFailReqs.Load(),
		Acked:          c.acked.Load(),
		AckRequests:    c.ackReqs.Load(),
		AckFailed:      c.ackFailReqs.Load(),
		PushRTTNanos:   c.pushRTT.Load(),
		AckRTTNanos:    c.ackRTT.Load(),
		AckTimed:       c.ackTimed.Load(),
	}
}

// sub returns c - o, field by field.
func (c Counts) sub(o Counts) Counts {
	return Counts{
		Offered:        c.Offered - o.Offered,
		Pushed:         c.Pushed - o.Pushed,
		Shed:           c.Shed - o.Shed,
		PushRequests:   c.PushRequests - o.PushRequests,
		PushFailed:     c.PushFailed - o.PushFailed,
		PushFailMsgs:   c.PushFailMsgs - o.PushFailMsgs,
		PushDuplicates: c.PushDuplicates - o.PushDuplicates,
		Popped:         c.Popped - o.Popped,
		PopRequests:    c.PopRequests - o.PopRequests,
		PopFailed:      c.PopFailed - o.PopFailed,
		Acked:          c.Acked - o.Acked,
		AckRequests:    c.AckRequests - o.AckRequests,
		AckFailed:      c.AckFailed - o.AckFailed,
		PushRTTNanos:   c.PushRTTNanos - o.PushRTTNanos,
		AckRTTNanos:    c.AckRTTNanos - o.AckRTTNanos,
		AckTimed:       c.AckTimed - o.AckTimed,
	}
}

// ackRTT is the average ack round trip, 0 when none was timed.
func (c Counts) ackRTT() time.Duration {
	if c.AckTimed == 0 {
		return 0
	}
	return time.Duration(c.AckRTTNanos / c.AckTimed)
}

// pushRTT is the average push round trip.
func (c Counts) pushRTT() time.Duration {
	if c.PushRequests == 0 {
		return 0
	}
	return time.Duration(c.PushRTTNanos / c.PushRequests)
}

// Latencies are recorded in microseconds, from 1 µs to one hour, with
// three significant digits.
const (
	latMin    = 1
	latMax    = int64(time.Hour / time.Microsecond)
	latDigits = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(latMin, latMax, latDigits)
}

// latencies collects end-to-end latencies. Consumers record into the
// current histogram under a lock, a batch at a time; the ticker swaps it
// out every second and merges it into the interval's and the run's.
type latencies struct {
	mu    sync.Mutex
	cur   *hdrhistogram.Histogram
	spare *hdrhistogram.Histogram
}

func newLatencies() *latencies {
	return &latencies{cur: newHistogram(), spare: newHistogram()}
}

// record adds the latencies, in microseconds, of one batch.
func (l *latencies) record(us []int64) {
	l.mu.Lock()
	for _, v := range us {
		// Values out of range are clamped rather than lost: a latency
		// over an hour is still a latency.
		_ = l.cur.RecordValue(min(max(v, latMin), latMax))
	}
	l.mu.Unlock()
}

// swap returns the histogram of the last period; it is valid until the
// next swap.
func (l *latencies) swap() *hdrhistogram.Histogram {
	l.spare.Reset()
	l.mu.Lock()
	h := l.cur
	l.cur = l.spare
	l.mu.Unlock()
	l.spare = h
	return h
}

// Percentiles of a latency histogram, in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Percentiles{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}
