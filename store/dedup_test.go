package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dedupModel is what comb_dedup_sets holds: every committed set, and each
// partition's next offset.
type dedupModel struct {
	sets []dedupSet
	next map[int64]int64
}

// read is readDedupSetsSQL.
func (m *dedupModel) read(pid, through int64, now time.Time, win time.Duration) []dedupSet {
	var out []dedupSet
	for _, s := range m.sets {
		if s.pid == pid && s.base >= through && (through > 0 || s.at.After(now.Add(-win-dedupSlack))) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b dedupSet) int { return int(a.base - b.base) })
	return out
}

// want is the answer dedup owes: the newest offset of id within the window.
func (m *dedupModel) want(pid int64, id string, now time.Time, win time.Duration) (int64, bool) {
	off, found := int64(-1), false
	for _, s := range m.sets {
		if s.pid != pid || !s.at.After(now.Add(-win)) {
			continue
		}
		for k, x := range s.ids {
			if o := s.base + int64(s.rels[k]); x == id && o > off {
				off, found = o, true
			}
		}
	}
	return off, found
}

// Push outcomes the simulation plays.
const (
	simCommitted      = iota // a push of its own, committed and added to the cache
	simUnknown               // committed, but the broker never learned it (lost reply to COMMIT)
	simFailed                // rolled back
	simNestedCommit          // inside a caller's transaction that commits
	simNestedRollback        // inside a caller's transaction that rolls back
	simOutcomes
)

// simulateDedup plays writeDedup's use of the cache against the model for a
// sequence of operations decoded from ops, and fails when any lookup
// differs from the model's answer. Two caches are two brokers on one
// database.
func simulateDedup(t *testing.T, ops []byte) {
	caches := []*dedupCache{newDedupCache(), newDedupCache()}
	if len(ops)%2 == 1 {
		// Hashes that collide often ("i0" with "i3"): a suspect is then
		// often another id, and a hash's entry serves two.
		for _, c := range caches {
			c.hash = func(id string) uint64 { return uint64(id[len(id)-1] % 3) }
		}
	}
	m := &dedupModel{next: map[int64]int64{}}
	clock := time.Unix(1_000_000, 0)
	windows := map[int64]time.Duration{0: 10 * time.Second, 1: 10 * time.Second, 2: 3 * time.Second}
	var trace []string
	defer func() {
		if t.Failed() {
			t.Logf("operations:\n%s", strings.Join(trace, "\n"))
		}
	}()
	for len(ops) >= 3 {
		kind, a, b := ops[0], ops[1], ops[2]
		ops = ops[3:]
		trace = append(trace, fmt.Sprintf("kind %d a %d b %d (clock %v)", kind%6, a, b, clock.Unix()))
		switch kind % 6 {
		case 0, 1, 5: // a push
			c := caches[a%2]
			pid := int64(b % 3)
			win := windows[pid]
			now := clock
			if kind%6 == 5 { // a transaction that began a while ago
				now = clock.Add(-time.Duration(a%12) * time.Second)
			}
			outcome := int(a>>1) % simOutcomes
			shared := outcome <= simFailed
			ids := []string{"i" + string(rune('0'+(a>>3)%6)), "i" + string(rune('0'+(b>>2)%6)), "i" + string(rune('0'+(b>>5)%6))}
			extra := int64(b>>4) % 3 // messages without ids, ahead of the ids

			through := c.throughs([]int64{pid})
			reads := map[int64][]dedupSet{pid: m.read(pid, through[0], now, win)}
			view := &dedupView{c: c, now: now}
			nexts := []int64{m.next[pid]}
			if again := c.resolve(view, shared, []int64{pid}, through, nexts, []time.Duration{win}, reads); len(again) > 0 {
				reads = map[int64][]dedupSet{pid: m.read(pid, 0, now, win)}
				require.Empty(t, c.resolve(view, shared, again, []int64{0}, nexts, []time.Duration{win}, reads), "a whole read is complete")
			}
			set := dedupSet{pid: pid, base: m.next[pid], at: now}
			var keys []dedupKey
			for _, id := range ids {
				if k := (dedupKey{pid, id}); !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			known, err := view.known(keys, map[int64]time.Duration{pid: win}, func(sus []dedupSuspect) ([]int64, error) {
				offs := make([]int64, len(sus))
				for i, s := range sus { // what checkSuspectsSQL answers
					offs[i] = -1
					if off, ok := m.want(s.key.pid, s.key.id, now, win); ok {
						offs[i] = off
					}
				}
				return offs, nil
			})
			require.NoError(t, err)
			for _, k := range keys {
				got, gotOK := known[k]
				off, ok := m.want(pid, k.id, now, win)
				require.Equal(t, ok, gotOK, "id %s in partition %d: duplicate?", k.id, pid)
				if ok {
					require.Equal(t, off, got, "id %s in partition %d: offset", k.id, pid)
					continue
				}
				set.ids = append(set.ids, k.id)
				set.rels = append(set.rels, int32(extra)+int32(len(set.ids)-1))
			}
			n := extra + int64(len(set.ids))
			if outcome == simFailed || outcome == simNestedRollback {
				continue
			}
			m.next[pid] += n
			if len(set.ids) > 0 {
				m.sets = append(m.sets, set)
			}
			if outcome == simCommitted && len(set.ids) > 0 {
				c.committed([]dedupSet{set}, []int64{set.base + n})
			}
		case 2: // time passes
			clock = clock.Add(time.Duration(a%16) * time.Second / 2)
		case 3: // an operator changes a window
			windows[int64(b%3)] = time.Duration(1+a%20) * time.Second
		case 4: // a broker's sweep, by a local clock that may be off
			caches[a%2].expire(clock.Add(time.Duration(int(b%41)-20) * time.Second))
		}
	}
	for _, c := range caches {
		parts, ids := c.size()
		var n int64
		for _, p := range c.parts {
			n += int64(len(p.ids))
		}
		require.Equal(t, n, ids, "the id count matches the maps")
		require.LessOrEqual(t, parts, int64(3))
	}
}

// FuzzDedupCache fences the in-memory dedup sets with a model of the
// database: whatever two brokers, failed commits, callers' transactions,
// window changes and skewed sweeps do, a lookup answers what a read of
// every set would.
func FuzzDedupCache(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 2, 3, 0, 0, 0, 0})
	f.Add([]byte{0, 2, 1, 0, 3, 1, 2, 30, 0, 4, 0, 40, 0, 0, 1, 5, 11, 2})
	f.Fuzz(func(t *testing.T, ops []byte) { simulateDedup(t, ops) })
}

// TestDedupCacheAgainstModel runs the simulation on many random sequences,
// so that every test run covers what the fuzzer would find first.
func TestDedupCacheAgainstModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		ops := make([]byte, 3*(1+r.IntN(200)))
		for i := range ops {
			ops[i] = byte(r.Uint32())
		}
		simulateDedup(t, ops)
	}
}
