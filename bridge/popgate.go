package bridge

import (
	"sync"
	"sync/atomic"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// The pop gate bounds, per queue and group, the store pops that name no
// partition and run at once, by what they find.
//
// Each such pop leases what has gathered in the partitions it takes since
// the group's last pop there, and its statement costs PostgreSQL about the
// same whatever it finds. When many consumers of a group pop at once and
// the messages come one at a time, every pop finds a few of them: in the
// closed loop of single-message pushes (256 producers, 32 consumers), a
// pop found about 10 of its 100, and pops were most of PostgreSQL's time.
// Fewer pops at once let more gather between them, and each then costs a
// message less: the gate lowers a group's limit while its pops come back
// less than half full, and raises it while they come back fuller, so the
// limit settles where a pop is about half full. When pops come back full
// (the reference shape) it stays at Config.PopWorkers, and it never binds
// at light load, where pops do not wait on each other.
//
// A pop the gate holds waits in its group's line, not on a worker: the
// pop that leaves the gate puts it back on the job channel, which never
// blocks (see popper). A line is never left without a pop in the gate
// ahead of it, so it always drains, at a Stop as at any other time.
//
// A long poll in line is a waiting pop like a parked one, and a push hands
// it messages the same way (takeLined, handoff.go): the gate bounds pop
// statements, and a hand-off is none. Without that, a group whose limit
// had fallen kept it there at light load: its consumers' pops, all in
// line, were never parked for pushes to answer, so each ran a statement
// that found a message or two, thin, and the limit stayed at gateMin (at
// 1,000 single-message pushes a second, e2e p50 went from about 1 ms to
// 150–320 ms, PostgreSQL from 0.5 to 1.1 cores; docs/benchmarks.md).

// gateMin is the lowest a group's limit goes: a pop that reads every
// cursor of a large group can take seconds, and with one pop at a time
// the group's other consumers would wait on it.
const gateMin = 2

// gateKey is a group of a queue.
type gateKey struct {
	queue domain.QueueRef
	group string
}

// groupGate is one group's pops in the gate: how many run, how many may,
// and the line of those waiting.
type groupGate struct {
	active, limit int
	line          []*popJob
}

// popGate is the gates of the groups whose pops run or wait.
type popGate struct {
	max   int // Config.PopWorkers: the limit of a group that pops fill
	mu    sync.Mutex
	gates map[gateKey]*groupGate
	// lined counts the pops that waited in a line (Stats.PopsGated).
	lined atomic.Int64
	// inLine is how many pops are in lines now, read without mu.
	inLine atomic.Int64
}

func newPopGate(max int) *popGate {
	return &popGate{max: max, gates: map[gateKey]*groupGate{}}
}

// gated reports whether job goes through the gate: a pop of one queue that
// names no partition.
func gated(job *popJob) bool { return !job.ns && job.req.Partition == "" }

// keyOf is job's group in the gate.
func keyOf(job *popJob) gateKey {
	g := job.req.Group
	if g == "" {
		g = protocol.DefaultGroup
	}
	return gateKey{job.req.Queue, g}
}

// enter lets job run, or puts it in its group's line and reports false.
func (pg *popGate) enter(job *popJob) bool {
	if !gated(job) {
		return true
	}
	k := keyOf(job)
	pg.mu.Lock()
	defer pg.mu.Unlock()
	g := pg.gates[k]
	if g == nil {
		g = &groupGate{limit: pg.max}
		pg.gates[k] = g
	}
	if g.active >= g.limit {
		g.line = append(g.line, job)
		pg.lined.Add(1)
		pg.inLine.Add(1)
		return false
	}
	g.active++
	return true
}

// popFill is what a pop found, for its group's limit.
type popFill int8

const (
	fillNone popFill = iota // no messages, or an error: nothing learnt
	fillThin                // less than half of what it could take
	fillFull                // half or more
)

// fillOf says how full msgs leaves req: by count against its max, or by
// bytes against its max_bytes.
func fillOf(req domain.PopParams, msgs []domain.Message) popFill {
	if len(msgs) == 0 {
		return fillNone
	}
	maxN := req.Max
	if maxN <= 0 {
		maxN = protocol.DefaultPopMax
	}
	if 2*len(msgs) >= maxN {
		return fillFull
	}
	if req.MaxBytes > 0 {
		bytes := 0
		for i := range msgs {
			bytes += len(msgs[i].Data)
		}
		if 2*bytes >= req.MaxBytes {
			return fillFull
		}
	}
	return fillThin
}

// leave ends the run of job, which entered with k, moves its group's limit
// by what it found, and returns the pops of the line that may run now,
// for the caller to put back on the job channel.
func (pg *popGate) leave(k gateKey, fill popFill) []*popJob {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	g := pg.gates[k]
	g.active--
	switch fill {
	case fillFull:
		g.limit = min(g.limit+1, pg.max)
	case fillThin:
		g.limit = max(g.limit-1, min(gateMin, pg.max))
	}
	var next []*popJob
	for len(g.line) > 0 && g.active < g.limit {
		next = append(next, g.line[0])
		g.line[0] = nil
		g.line = g.line[1:]
		g.active++
	}
	pg.inLine.Add(-int64(len(next)))
	if g.active == 0 {
		delete(pg.gates, k) // idle: the next pop starts at the top again
	}
	return next
}

// takeLined offers take the pops in the lines of queue's groups, line by
// line in order; those it takes leave their line (for a hand-off). It
// stops at the first that take answers more false to.
func (pg *popGate) takeLined(queue domain.QueueRef, take func(*popJob) (took, more bool)) {
	if pg.inLine.Load() == 0 {
		return
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	more := true
	for k, g := range pg.gates {
		if k.queue != queue || len(g.line) == 0 {
			continue
		}
		kept := g.line[:0]
		for _, job := range g.line {
			took := false
			if more {
				took, more = take(job)
			}
			if !took {
				kept = append(kept, job)
			}
		}
		pg.inLine.Add(-int64(len(g.line) - len(kept)))
		clear(g.line[len(kept):])
		g.line = kept
		if !more {
			return
		}
	}
}

// lines returns how many pops wait in the gate, for Stats.
func (pg *popGate) lines() int { return int(pg.inLine.Load()) }
