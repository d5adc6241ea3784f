package bridge

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

func gateJob(queue, group string) *popJob {
	return &popJob{req: domain.PopParams{Queue: domain.Global(queue), Group: group, Max: 10}}
}

// TestPopGateLimits pins the gate's rules: a group's limit starts at the
// workers, falls by one for each thin pop down to gateMin, rises by one
// for each full pop back up to the workers; pops over the limit wait in
// line and leave it in order as others leave the gate; an idle group is
// forgotten. Other groups, pops naming a partition and namespace pops
// never wait.
func TestPopGateLimits(t *testing.T) {
	t.Parallel()
	pg := newPopGate(4)
	k := gateKey{domain.Global("q"), protocol.DefaultGroup}
	var in []*popJob
	for range 4 {
		j := gateJob("q", "")
		require.True(t, pg.enter(j))
		in = append(in, j)
	}
	require.Equal(t, k, keyOf(in[0]), "no group is the default group")
	line := []*popJob{gateJob("q", protocol.DefaultGroup), gateJob("q", "")}
	for _, j := range line {
		require.False(t, pg.enter(j), "over the limit: in line")
	}
	require.True(t, pg.enter(gateJob("q", "other")), "another group has its own limit")
	named := gateJob("q", "")
	named.req.Partition = "p"
	require.True(t, pg.enter(named))
	ns := gateJob("q", "")
	ns.ns = true
	require.True(t, pg.enter(ns))
	require.Equal(t, 2, pg.lines())

	// Thin pops: 4 → 3 → 2, and no lower; nobody leaves the line while
	// the pops in the gate are at the limit.
	require.Empty(t, pg.leave(k, fillThin)) // active 3, limit 3
	require.Empty(t, pg.leave(k, fillThin)) // active 2, limit 2
	require.Equal(t, 2, pg.gates[k].limit)
	require.Equal(t, line[:1], pg.leave(k, fillThin), "active 1, limit 2: the first in line goes in")
	require.Equal(t, 2, pg.gates[k].limit, "never below gateMin")
	require.Equal(t, 1, pg.lines())

	// A full pop raises the limit and lets the next one in.
	next := pg.leave(k, fillFull) // active 1, limit 3
	require.Equal(t, line[1:], next)
	require.Equal(t, 3, pg.gates[k].limit)
	require.Zero(t, pg.lines())
	// An empty pop teaches nothing.
	require.Empty(t, pg.leave(k, fillNone))
	require.Equal(t, 3, pg.gates[k].limit)
	require.Empty(t, pg.leave(k, fillFull))
	require.NotContains(t, pg.gates, k, "an idle group is forgotten")
	require.True(t, pg.enter(gateJob("q", "")))
	require.Equal(t, 4, pg.gates[k].limit, "and starts at the top again")
}

// TestPopGateOneWorker: with one worker, the limit is one.
func TestPopGateOneWorker(t *testing.T) {
	t.Parallel()
	pg := newPopGate(1)
	k := gateKey{domain.Global("q"), protocol.DefaultGroup}
	require.True(t, pg.enter(gateJob("q", "")))
	j := gateJob("q", "")
	require.False(t, pg.enter(j))
	require.Equal(t, []*popJob{j}, pg.leave(k, fillThin))
	require.Equal(t, 1, pg.gates[k].limit)
}

func TestFillOf(t *testing.T) {
	t.Parallel()
	msgs := func(n, size int) []domain.Message {
		out := make([]domain.Message, n)
		for i := range out {
			out[i].Data = make([]byte, size)
		}
		return out
	}
	req := domain.PopParams{Max: 10, MaxBytes: 1000}
	require.Equal(t, fillNone, fillOf(req, nil))
	require.Equal(t, fillThin, fillOf(req, msgs(4, 10)))
	require.Equal(t, fillFull, fillOf(req, msgs(5, 10)), "half its max")
	require.Equal(t, fillFull, fillOf(req, msgs(2, 250)), "half its bytes")
	require.Equal(t, fillThin, fillOf(domain.PopParams{}, msgs(49, 10)), "max 0 is the default max")
	require.Equal(t, fillFull, fillOf(domain.PopParams{}, msgs(protocol.DefaultPopMax/2, 10)))
}

// TestPopGateTakeLined: a hand-off takes pops out of the lines of its
// queue's groups only, those it wants, and stops when told; the rest keep
// their order, and the count of pops in line follows.
func TestPopGateTakeLined(t *testing.T) {
	t.Parallel()
	pg := newPopGate(1)
	k := gateKey{domain.Global("q"), protocol.DefaultGroup}
	require.True(t, pg.enter(gateJob("q", "")))
	require.True(t, pg.enter(gateJob("r", "")))
	var line []*popJob
	for range 4 {
		j := gateJob("q", "")
		require.False(t, pg.enter(j))
		line = append(line, j)
	}
	other := gateJob("r", "")
	require.False(t, pg.enter(other))
	require.EqualValues(t, 5, pg.inLine.Load())

	var seen []*popJob
	pg.takeLined(domain.Global("q"), func(j *popJob) (bool, bool) {
		seen = append(seen, j)
		return j == line[1], j != line[2] // take the second, stop at the third
	})
	require.Equal(t, line[:3], seen, "in line order, up to the stop; never another queue's")
	require.Equal(t, []*popJob{line[0], line[2], line[3]}, pg.gates[k].line)
	require.EqualValues(t, 4, pg.inLine.Load())
	require.Equal(t, 4, pg.lines())

	require.Equal(t, []*popJob{line[0]}, pg.leave(k, fillNone))
	require.EqualValues(t, 3, pg.inLine.Load())
	pg.takeLined(domain.Global("q"), func(*popJob) (bool, bool) { return true, true })
	require.Empty(t, pg.gates[k].line)
	require.EqualValues(t, 1, pg.inLine.Load(), "r's pop is still in line")
}
