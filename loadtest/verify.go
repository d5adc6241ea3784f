package loadtest

import (
	"sync"
	"sync/atomic"
)

// Per-message accounting.
//
// Every message belongs to a stream, (producer, partition): the pacer that
// sent it and the partition it went to. Sequences are given per stream,
// from 1, when a push request is sent (a shed request gets none: it was
// never sent). Each message also carries its stream's floor: the highest
// sequence n such that every push of the stream holding a sequence up to n
// had been answered, stored or failed, when this message was sent.
//
// What the verdict counts, for the one consumer group of the run:
//
//   - missing: a message whose push was answered "stored" and that no
//     consumer received by the end of the run (drain included).
//   - duplicates: deliveries of a message after its first. At-least-once
//     delivery allows them (an expired lease or a failed ack hands a span
//     back), so they are counted, not errors.
//   - order violations, of two kinds:
//     skips: a message t delivered for the first time before some message
//     s that must precede it, where s must precede t when s sits earlier
//     in t's push request, or when s's push was answered "stored" before
//     t's was sent (s <= floor(t)). The broker then stored s at a lower
//     offset of the partition, and a group receives a partition in offset
//     order, so delivering t first skipped s. Pushes that were in flight
//     together have no order between them and are never compared; a
//     message whose push failed (it may or may not have been stored) is
//     never required before another.
//     after-ack: a delivery of a message after an ack that covered it was
//     accepted (or, with auto-ack, after it was delivered once). An
//     accepted ack moves the group's cursor past the message, so the
//     broker must not deliver it again. Redeliveries after a lease that
//     expired or an ack that failed or was refused are not counted here:
//     those messages were never completed.
//   - failed pushes: messages in push requests that failed (error or
//     timeout). They may have been stored anyway; those delivered are
//     reported, the others are not missing.
//
// The run fails its verification when missing or order violations are
// above zero.

// Message states, one byte per message of a stream.
const (
	stStored    = 1 << iota // the push was answered stored
	stFailed                // the push failed; stored or not, nobody knows
	stSeen                  // delivered at least once
	stCompleted             // covered by an accepted ack (or auto-acked)
)

// stream is one (producer, partition) sequence.
type stream struct {
	mu sync.Mutex
	// next is the last sequence given out.
	next uint64
	// st holds the states of sequences 1..next at st[seq-1] (verify only).
	st []uint8
	// resolved: every sequence up to it has its push answered.
	resolved uint64
	// checked: every sequence up to it is failed, or stored and seen.
	checked uint64
}

// verifier tracks every stream of a run. Without verification it only
// hands out sequences.
type verifier struct {
	run        uint32
	verify     bool
	autoAck    bool
	partitions int
	producers  int
	streams    []stream // producer*partitions + partition

	unseenStored atomic.Int64 // stored and not yet delivered
	duplicates   atomic.Int64
	skips        atomic.Int64
	afterAck     atomic.Int64
	unknown      atomic.Int64 // a run's message never sent
	foreign      atomic.Int64 // not this run's message
}

func newVerifier(run uint32, producers, partitions int, verify, autoAck bool) *verifier {
	return &verifier{
		run:        run,
		verify:     verify,
		autoAck:    autoAck,
		partitions: partitions,
		producers:  producers,
		streams:    make([]stream, producers*partitions),
	}
}

func (v *verifier) stream(producer, partition uint32) *stream {
	if int(producer) >= v.producers || int(partition) >= v.partitions {
		return nil
	}
	return &v.streams[int(producer)*v.partitions+int(partition)]
}

// begin gives n sequences of a stream to a push request about to be sent
// and returns the first and the stream's floor.
func (v *verifier) begin(producer, partition, n int) (first, floor uint64) {
	s := &v.streams[producer*v.partitions+partition]
	s.mu.Lock()
	defer s.mu.Unlock()
	first = s.next + 1
	s.next += uint64(n)
	if v.verify {
		s.st = append(s.st, make([]uint8, n)...)
	}
	return first, s.resolved
}

// finish records the answer to the push request holding sequences
// first..first+n-1.
func (v *verifier) finish(producer, partition int, first uint64, n int, stored bool) {
	if !v.verify {
		return
	}
	s := &v.streams[producer*v.partitions+partition]
	s.mu.Lock()
	defer s.mu.Unlock()
	mark := uint8(stFailed)
	if stored {
		mark = stStored
	}
	unseen := 0
	for i := range uint64(n) {
		p := &s.st[first-1+i]
		*p |= mark
		if stored && *p&stSeen == 0 {
			unseen++
		}
	}
	v.unseenStored.Add(int64(unseen))
	for s.resolved < s.next && s.st[s.resolved]&(stStored|stFailed) != 0 {
		s.resolved++
	}
}

// ref names a delivered message of this run, for marking it completed.
type ref struct {
	s   *stream
	seq uint64
}

// observe records one delivery and returns its ref (s nil for a message
// not of this run or not tracked).
func (v *verifier) observe(h *header) ref {
	if h.Run != v.run {
		v.foreign.Add(1)
		return ref{}
	}
	s := v.stream(h.Producer, h.Partition)
	if s == nil {
		v.unknown.Add(1)
		return ref{}
	}
	if !v.verify {
		return ref{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.Seq == 0 || h.Seq > s.next {
		v.unknown.Add(1)
		return ref{}
	}
	i := h.Seq - 1
	p := &s.st[i]
	if *p&stSeen != 0 {
		v.duplicates.Add(1)
		if *p&stCompleted != 0 {
			v.afterAck.Add(1)
		}
		return ref{s, h.Seq}
	}
	*p |= stSeen
	if v.autoAck {
		*p |= stCompleted
	}
	if *p&stStored != 0 {
		v.unseenStored.Add(-1)
	}
	skipped := h.Index > 0 && (h.Seq < 2 || s.st[i-1]&stSeen == 0)
	for s.checked < s.next {
		c := s.st[s.checked]
		if c&stFailed == 0 && c&(stStored|stSeen) != stStored|stSeen {
			break
		}
		s.checked++
	}
	if s.checked < h.Floor {
		// s.checked+1 was answered stored before this message was sent
		// and has not been delivered.
		skipped = true
	}
	if skipped {
		v.skips.Add(1)
	}
	return ref{s, h.Seq}
}

// complete marks messages covered by an accepted ack.
func (v *verifier) complete(refs []ref) {
	if !v.verify {
		return
	}
	var last *stream
	for _, r := range refs {
		if r.s == nil {
			continue
		}
		if r.s != last {
			if last != nil {
				last.mu.Unlock()
			}
			last = r.s
			last.mu.Lock()
		}
		r.s.st[r.seq-1] |= stCompleted
	}
	if last != nil {
		last.mu.Unlock()
	}
}

// Verdict is the outcome of per-message verification.
type Verdict struct {
	// Checked is false when the run did not verify: only Foreign counts.
	Checked bool `json:"checked"`
	// Sent counts messages in push requests sent.
	Sent int64 `json:"sent"`
	// Stored counts messages whose push was answered stored.
	Stored int64 `json:"stored"`
	// Delivered counts distinct messages of this run delivered.
	Delivered int64 `json:"delivered"`
	// Missing counts stored messages never delivered.
	Missing int64 `json:"missing"`
	// Duplicates counts deliveries beyond each message's first.
	Duplicates int64 `json:"duplicates"`
	// OrderViolations is Skips + AfterAck.
	OrderViolations int64 `json:"order_violations"`
	// Skips counts first deliveries ahead of a message that had to come
	// first.
	Skips int64 `json:"skips"`
	// AfterAck counts deliveries of a message after an accepted ack
	// covered it.
	AfterAck int64 `json:"after_ack"`
	// FailedPush counts messages of failed push requests, and
	// FailedDelivered those of them delivered all the same.
	FailedPush      int64 `json:"failed_push"`
	FailedDelivered int64 `json:"failed_delivered"`
	// Unanswered counts messages whose push had no answer at the end.
	Unanswered int64 `json:"unanswered"`
	// Unknown counts deliveries carrying this run's id but a sequence that
	// was never sent: corruption.
	Unknown int64 `json:"unknown"`
	// Foreign counts deliveries of messages from other runs or other
	// producers, left in the queue; they are acked and otherwise ignored.
	Foreign int64 `json:"foreign"`
}

// OK reports whether the verification passed: nothing missing, nothing out
// of order, nothing corrupt.
func (v Verdict) OK() bool {
	return !v.Checked || (v.Missing == 0 && v.OrderViolations == 0 && v.Unknown == 0)
}

// verdict sums up every stream. Call it when pushes and consumers stopped.
func (v *verifier) verdict() Verdict {
	out := Verdict{Checked: v.verify, Foreign: v.foreign.Load(), Unknown: v.unknown.Load()}
	if !v.verify {
		return out
	}
	out.Duplicates = v.duplicates.Load()
	out.Skips = v.skips.Load()
	out.AfterAck = v.afterAck.Load()
	out.OrderViolations = out.Skips + out.AfterAck
	for i := range v.streams {
		s := &v.streams[i]
		s.mu.Lock()
		out.Sent += int64(len(s.st))
		for _, c := range s.st {
			seen := c&stSeen != 0
			if seen {
				out.Delivered++
			}
			switch {
			case c&stStored != 0:
				out.Stored++
				if !seen {
					out.Missing++
				}
			case c&stFailed != 0:
				out.FailedPush++
				if seen {
					out.FailedDelivered++
				}
			default:
				out.Unanswered++
			}
		}
		s.mu.Unlock()
	}
	return out
}
