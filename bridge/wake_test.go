package bridge

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

func TestWakeCodec(t *testing.T) {
	t.Parallel()
	var w wakeSet
	w.add(domain.Global("q"), "", "eu")
	w.add(domain.Global("q"), "billing", "us")
	w.add(domain.Global("q"), "", "eu")
	w.add(domain.Global("r"), "g", "p")
	w.addAll(domain.Global("r"))
	w.add(domain.Global("r"), "g", "p2")
	require.Equal(t, []domain.QueueRef{domain.Global("q"), domain.Global("r")}, w.queues)

	got, n := decodeWake(encodeWake(w.targets[domain.Global("q")], 0))
	require.ElementsMatch(t, []wakeTarget{{"", "eu"}, {"billing", "us"}}, got)
	require.Zero(t, n)
	got, n = decodeWake(encodeWake(w.targets[domain.Global("q")], 300))
	require.ElementsMatch(t, []wakeTarget{{"", "eu"}, {"billing", "us"}}, got)
	require.Equal(t, 300, n)
	got, _ = decodeWake(encodeWake(w.targets[domain.Global("r")], 0))
	require.Nil(t, got, "addAll wins")
	got, n = decodeWake(encodeWake(w.targets[domain.Global("r")], 7))
	require.Nil(t, got)
	require.Equal(t, 7, n)
	got, n = decodeWake(nil)
	require.Nil(t, got)
	require.Zero(t, n)
	got, _ = decodeWake([]byte("garbage"))
	require.Nil(t, got)
	got, n = decodeWake([]byte("#x\n"))
	require.Nil(t, got)
	require.Zero(t, n, "a count it cannot read wakes everything")

	var many wakeSet
	for i := range maxWakeTargets + 5 {
		many.add(domain.Global("q"), "", string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	got, _ = decodeWake(encodeWake(many.targets[domain.Global("q")], 0))
	require.Nil(t, got, "too many targets: everything")

	// A seek's wake-up: read the group anew, and wake everything (also
	// where a bridge does not know the '!').
	group, ok := decodeReread(encodeReread("billing"))
	require.True(t, ok)
	require.Equal(t, "billing", group)
	got, n = decodeWake(encodeReread("billing"))
	require.Nil(t, got)
	require.Zero(t, n)
	for _, body := range []string{"", "billing\n", "!billing", "!a\tb\n", "!a\nb\n", "#3\n!g\n"} {
		_, ok := decodeReread([]byte(body))
		require.False(t, ok, "%q", body)
	}
}

// FuzzWakeBodies: no body makes the wake-up decoders panic or return more
// than maxWakeTargets targets, and what they read encodes back to itself.
func FuzzWakeBodies(f *testing.F) {
	for _, seed := range []string{"", "#12\n", "#3\n\teu\nbilling\tus\n", "!billing\n", "garbage", "#x\n", "\t\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		targets, n := decodeWake(body)
		require.LessOrEqual(t, len(targets), maxWakeTargets)
		require.GreaterOrEqual(t, n, 0)
		if targets != nil {
			set := map[wakeTarget]struct{}{}
			for _, tg := range targets {
				require.NotEmpty(t, tg.partition)
				require.NotContains(t, tg.group+tg.partition, "\n")
				set[tg] = struct{}{}
			}
			again, m := decodeWake(encodeWake(set, n))
			require.ElementsMatch(t, slices.Collect(maps.Keys(set)), again)
			require.Equal(t, n, m)
		}
		if group, ok := decodeReread(body); ok {
			require.Equal(t, body, encodeReread(group))
		}
	})
}

// TestWakeTargets checks which waiters a wake-up retries.
func TestWakeTargets(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	waiters := map[string]*popJob{}
	park := func(name, group, partition string) {
		job := &popJob{call: testCall(), req: domain.PopParams{Queue: domain.Global("q"), Group: group, Partition: partition}, deadline: time.Now().Add(time.Hour)}
		require.True(t, p.park(job, attachSeq(p, job), time.Time{}))
		waiters[name] = job
	}
	woken := func() []string {
		var out []string
		for {
			select {
			case job := <-p.ch:
				for name, j := range waiters {
					if j == job {
						out = append(out, name)
						delete(waiters, name)
					}
				}
			default:
				return out
			}
		}
	}
	park("g1", "g", "")
	park("g2", "g", "")
	park("g3", "g", "")
	park("h1", "h", "")
	park("g-eu", "g", "eu")
	park("h-us", "h", "us")
	require.Equal(t, 6, p.waiting())

	// A push to one partition: one waiter per group, plus those that
	// asked for that partition.
	p.wake(domain.Global("q"), []wakeTarget{{"", "us"}}, 0)
	got := woken()
	require.Len(t, got, 3)
	require.Contains(t, got, "h1")
	require.Contains(t, got, "h-us")
	require.Equal(t, 3, p.waiting())

	// An ack of group g on partition eu: one more of g, and g-eu.
	p.wake(domain.Global("q"), []wakeTarget{{"g", "eu"}}, 0)
	got = woken()
	require.Len(t, got, 2)
	require.Contains(t, got, "g-eu")

	// Another queue's wake-up touches nothing; a bare one wakes everyone.
	p.wake(domain.Global("other"), nil, 0)
	require.Empty(t, woken())
	p.wake(domain.Global("q"), nil, 0)
	require.Len(t, woken(), 1)
	require.Zero(t, p.waiting())
	p.mu.Lock()
	defer p.mu.Unlock()
	// Woken jobs let go of the queue until their next try attaches again:
	// a wake-up before that try needs no record, the try will see its data.
	require.NotContains(t, p.queues, domain.Global("q"))
}

// TestWakeCountBudget: a push's wake-up that says how many messages it made
// ready retries, per group, only the waiters it takes to cover them.
func TestWakeCountBudget(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	for i := range 5 {
		for _, g := range []string{"g", "h"} {
			job := &popJob{call: testCall(), req: domain.PopParams{Queue: domain.Global("q"), Group: g, Max: 100}, deadline: time.Now().Add(time.Hour)}
			require.True(t, p.park(job, attachSeq(p, job), time.Time{}), "waiter %d", i)
		}
	}
	eu := &popJob{call: testCall(), req: domain.PopParams{Queue: domain.Global("q"), Group: "g", Partition: "eu"}, deadline: time.Now().Add(time.Hour)}
	require.True(t, p.park(eu, attachSeq(p, eu), time.Time{}))
	require.Equal(t, 11, p.waiting())

	// 150 messages on partitions the targets do not list (too many to
	// name): two waiters of max 100 per group cover them, and the waiter
	// of a named partition would come too, but eu is not named.
	p.wake(domain.Global("q"), []wakeTarget{{"", "us"}}, 150)
	require.Equal(t, 7, p.waiting(), "2 per group woken")
	// Too many partitions to name: every partition waiter comes too.
	p.wake(domain.Global("q"), nil, 1)
	require.Equal(t, 4, p.waiting(), "1 per group and the eu waiter")
	for range 7 {
		<-p.ch
	}
}

// attachSeq attaches job's pop as run does and returns the wake sequence.
func attachSeq(p *popper, job *popJob) uint64 {
	seq, _ := p.attach(job.req.Queue, job.req.Group, job.req.Partition == "")
	return seq
}

// TestEmptyHint: after a pop naming no partition finds nothing, another
// of the same group skips the store until a wake-up or the retry interval;
// other groups and named partitions are not affected.
func TestEmptyHint(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	first := &popJob{call: testCall(), req: domain.PopParams{Queue: domain.Global("q"), Group: "g"}, deadline: time.Now().Add(time.Hour)}
	seq, empty := p.attach(domain.Global("q"), "g", true)
	require.False(t, empty.valid, "nothing known yet")
	require.True(t, p.park(first, seq, time.Now()))

	_, empty = p.attach(domain.Global("q"), "g", true)
	require.True(t, empty.valid, "same group, no wake since: known empty")
	_, empty = p.attach(domain.Global("q"), "h", true)
	require.False(t, empty.valid, "another group has its own cursors")
	_, empty = p.attach(domain.Global("q"), "g", false)
	require.False(t, empty.valid, "a pop naming a partition always asks")

	p.wake(domain.Global("q"), nil, 0)
	_, empty = p.attach(domain.Global("q"), "g", true)
	require.False(t, empty.valid, "a wake-up ends what was known")

	// The retry interval bounds how long a mark holds, for messages that
	// become ready without a wake-up (an expired lease).
	b2 := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Nanosecond}}
	p2 := newPopper(b2)
	j := &popJob{call: testCall(), req: domain.PopParams{Queue: domain.Global("q"), Group: "g"}, deadline: time.Now().Add(time.Hour)}
	seq, _ = p2.attach(domain.Global("q"), "g", true)
	require.True(t, p2.park(j, seq, time.Now().Add(-time.Millisecond)))
	_, empty = p2.attach(domain.Global("q"), "g", true)
	require.False(t, empty.valid, "a mark older than the retry interval is not trusted")
	p.stopTimers()
	p2.stopTimers()
}

// TestWakeHints: a waiter naming no partition is woken with a partition
// the wake-up named, to try first.
func TestWakeHints(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	park := func(group string) *popJob {
		job := &popJob{call: testCall(), req: domain.PopParams{Queue: domain.Global("q"), Group: group, Max: 1}, deadline: time.Now().Add(time.Hour)}
		require.True(t, p.park(job, attachSeq(p, job), time.Time{}))
		return job
	}
	g1, g2, h := park("g"), park("g"), park("h")
	// A push: two partitions, two messages, for every group.
	p.wake(domain.Global("q"), []wakeTarget{{"", "eu"}, {"", "us"}}, 2)
	require.ElementsMatch(t, []string{"eu", "us"}, []string{g1.hint, g2.hint}, "each of g's waiters tries another partition")
	require.Equal(t, "eu", h.hint, "group h has its own")
	for range 3 {
		<-p.ch
	}
	// An ack that freed partition ap of group h hints at it.
	h2 := park("h")
	p.wake(domain.Global("q"), []wakeTarget{{"h", "ap"}}, 0)
	require.Equal(t, "ap", h2.hint)
	<-p.ch
	p.stopTimers()
}

// TestCandidates: once a group is known empty, wake-ups naming partitions
// make them the group's candidates instead of ending what is known; a
// wake-up naming none, or too many, ends it.
func TestCandidates(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	mark := func(group string) {
		job := &popJob{call: testCall(), req: domain.PopParams{Queue: domain.Global("q"), Group: group, Max: 1}, deadline: time.Now().Add(time.Hour)}
		seq, _ := p.attach(domain.Global("q"), group, true)
		require.True(t, p.park(job, seq, time.Now()))
	}
	mark("g")
	mark("h")
	_, k := p.attach(domain.Global("q"), "g", true)
	require.True(t, k.valid)
	require.Empty(t, k.cands)

	p.wake(domain.Global("q"), []wakeTarget{{"", "eu"}}, 1)  // a push to eu
	p.wake(domain.Global("q"), []wakeTarget{{"h", "us"}}, 0) // an ack of h freed us
	seq, k := p.attach(domain.Global("q"), "g", true)
	require.True(t, k.valid)
	require.Equal(t, []string{"eu"}, k.cands)
	_, kh := p.attach(domain.Global("q"), "h", true)
	require.Equal(t, []string{"eu", "us"}, kh.cands)

	// A pop that tried eu forgets it, unless a wake-up came meanwhile.
	p.forgetCandidates(domain.Global("q"), "g", seq, []string{"eu"})
	_, k = p.attach(domain.Global("q"), "g", true)
	require.True(t, k.valid)
	require.Empty(t, k.cands)
	seq, _ = p.attach(domain.Global("q"), "h", true)
	p.wake(domain.Global("q"), []wakeTarget{{"", "eu"}}, 1)
	p.forgetCandidates(domain.Global("q"), "h", seq, []string{"eu", "us"})
	_, kh = p.attach(domain.Global("q"), "h", true)
	require.Equal(t, []string{"eu"}, kh.cands, "eu was named again since the pop began, us was not")

	// Too many candidates, or a wake-up that names none, end the marks.
	many := make([]wakeTarget, maxCandidates)
	for i := range many {
		many[i] = wakeTarget{"", "p" + strconv.Itoa(i)}
	}
	p.wake(domain.Global("q"), many, len(many))
	_, kh = p.attach(domain.Global("q"), "h", true)
	require.False(t, kh.valid, "h had one candidate more than maxCandidates")
	_, k = p.attach(domain.Global("q"), "g", true)
	require.False(t, k.valid, "so had g")
	mark("g")
	p.wake(domain.Global("q"), []wakeTarget{{"", "a"}}, 1)
	_, k = p.attach(domain.Global("q"), "g", true)
	require.Equal(t, []string{"a"}, k.cands)
	p.wake(domain.Global("q"), nil, 0)
	_, k = p.attach(domain.Global("q"), "g", true)
	require.False(t, k.valid)
	for len(p.ch) > 0 {
		<-p.ch
	}
	p.stopTimers()
}

// TestWakeLog: an ack asks whether a wake-up named its partition during
// its store call; a log that wrapped past the call cannot tell, so it says
// yes.
func TestWakeLog(t *testing.T) {
	t.Parallel()
	var l wakeLog
	t0 := time.Now()
	l.add(domain.Global("q"), "eu", t0)
	since := t0.Add(time.Millisecond)
	require.False(t, l.namedSince(domain.Global("q"), "eu", since), "before the call")
	l.add(domain.Global("q"), "eu", since.Add(time.Millisecond))
	require.True(t, l.namedSince(domain.Global("q"), "eu", since))
	require.False(t, l.namedSince(domain.Global("q"), "us", since))
	require.False(t, l.namedSince(domain.Global("r"), "eu", since))
	l.add(domain.Global("r"), "", since.Add(2*time.Millisecond))
	require.True(t, l.namedSince(domain.Global("r"), "us", since), "a wake-up for every partition")

	var full wakeLog
	for i := range wakeLogSize + 1 {
		full.add(domain.Global("q"), "p", since.Add(time.Duration(i+1)*time.Microsecond))
	}
	require.True(t, full.namedSince(domain.Global("q"), "elsewhere", since), "wrapped past the call: maybe")
}

// TestAckWakes: an ack wakes its group when it may have made messages
// deliverable, or when it freed a partition that a push's wake-up named
// while the ack's store call ran; an ack within its lease, or a freed
// partition nobody pushed to meanwhile, wakes nobody.
func TestAckWakes(t *testing.T) {
	t.Parallel()
	p := newPopper(&Bridge{cfg: Config{MaxPops: 10, RetryInterval: time.Hour}})
	began := time.Now()
	require.True(t, p.ackWakes(domain.Global("q"), "eu", domain.AckResult{OK: true, More: true, Freed: true}, began))
	require.False(t, p.ackWakes(domain.Global("q"), "eu", domain.AckResult{OK: true}, began), "within its lease")
	require.False(t, p.ackWakes(domain.Global("q"), "eu", domain.AckResult{OK: true, Freed: true}, began), "freed, nothing pushed since")
	require.False(t, p.ackWakes(domain.Global("q"), "eu", domain.AckResult{Error: "lease expired"}, began))

	p.wake(domain.Global("q"), []wakeTarget{{"", "eu"}}, 1) // a push's wake-up during the call, no waiter here
	require.True(t, p.ackWakes(domain.Global("q"), "eu", domain.AckResult{OK: true, Freed: true}, began),
		"the push may have committed after the ack's snapshot")
	require.False(t, p.ackWakes(domain.Global("q"), "us", domain.AckResult{OK: true, Freed: true}, began), "another partition")
	require.False(t, p.ackWakes(domain.Global("q"), "eu", domain.AckResult{OK: true, Freed: true}, time.Now().Add(time.Second)),
		"a wake-up before the call: the ack's snapshot saw that push")
}

// testCall is the call of a job the popper tests park: the global tenant's.
func testCall() *call { return &call{t: &tenant{quota: newQuota(Quota{})}} }

// A pop that read every cursor and saw all the ready partitions leaves its
// group known: only those, and the partitions wake-ups named since its
// store call began, can be ready. A wake-up naming every partition since
// leaves it unknown; too many candidates make a partial mark of the first.
func TestLearnMarksKnownGroup(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	q := domain.Global("q")
	job := &popJob{call: testCall(), req: domain.PopParams{Queue: q, Group: "g", Max: 1}, deadline: time.Now().Add(time.Hour)}
	p.attach(q, "g", true) // the pop trying

	p.wake(q, []wakeTarget{{"", "before"}}, 1) // seen by the pop's statement
	began := time.Now()
	p.wake(q, []wakeTarget{{"", "during"}}, 1) // maybe not
	p.learn(job, began, []string{"ready"}, false)
	_, k := p.attach(q, "g", true)
	require.True(t, k.valid)
	require.ElementsMatch(t, []string{"ready", "during"}, k.cands)
	_, k = p.attach(q, "h", true)
	require.False(t, k.valid, "another group learned nothing")

	delete(p.queues[q].empty, "g")
	began = time.Now()
	p.wake(q, nil, 0)
	p.learn(job, began, nil, false)
	_, k = p.attach(q, "g", true)
	require.False(t, k.valid, "a wake-up named every partition during the call")

	many := make([]string, maxCandidates+1)
	for i := range many {
		many[i] = "p" + strconv.Itoa(i)
	}
	p.learn(job, time.Now(), many, false)
	_, k = p.attach(q, "g", true)
	require.True(t, k.valid)
	require.True(t, k.partial, "too many candidates: the first, as a partial mark")
	require.Equal(t, many[:maxCandidates], k.cands)

	// Some of the ready partitions: a partial mark, whose pops read every
	// cursor when none of its candidates is ready, and never wait on it.
	p.learn(job, time.Now(), []string{"some"}, true)
	_, k = p.attach(q, "g", true)
	require.True(t, k.valid)
	require.True(t, k.partial)
	require.Equal(t, []string{"some"}, k.cands)
}

// TestCandidateChunks: a pop tries its group's candidates a chunk at a
// time, every candidate once, starting at the chunk its turn names.
func TestCandidateChunks(t *testing.T) {
	t.Parallel()
	require.Nil(t, candidateChunks(nil, 3, 8))
	cands := make([]string, 20)
	for i := range cands {
		cands[i] = "p" + strconv.Itoa(i)
	}
	for turn := range 5 {
		chunks := candidateChunks(cands, turn, 8)
		require.Len(t, chunks, 3)
		require.Equal(t, cands[(turn%3)*8], chunks[0][0], "turn %d starts at its chunk", turn)
		var all []string
		for _, c := range chunks {
			require.LessOrEqual(t, len(c), 8)
			all = append(all, c...)
		}
		require.ElementsMatch(t, cands, all, "turn %d tries every candidate once", turn)
	}
	require.Equal(t, [][]string{{"a", "b"}}, candidateChunks([]string{"a", "b"}, 7, 8))

	// Pops that take one mark take turns.
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	q := domain.Global("q")
	job := &popJob{call: testCall(), req: domain.PopParams{Queue: q, Group: "g", Max: 1}}
	p.attach(q, "g", true)
	p.learn(job, time.Now(), cands, false)
	_, k1 := p.attach(q, "g", true)
	_, k2 := p.attach(q, "g", true)
	require.True(t, k1.valid)
	require.Equal(t, k1.turn+1, k2.turn)
}

// TestClaimedCandidates: a waiting pop leaves a candidate another waiting
// pop of its group is trying to that pop, and parks without a store call
// when that leaves it nothing; it stays parked when the claimer leased the
// partition, and is retried, hinted at it, when the claimer left it ready.
// A pop that deferred and has not parked yet retries instead of parking.
func TestClaimedCandidates(t *testing.T) {
	t.Parallel()
	p := newPopper(&Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}})
	q := domain.Global("q")
	newJob := func() *popJob {
		return &popJob{call: testCall(), req: domain.PopParams{Queue: q, Group: "g", Max: 1}, deadline: time.Now().Add(time.Hour)}
	}
	// The group is known empty and its waiter w parked; a push to eu
	// retries w.
	w := newJob()
	seq, _ := p.attach(q, "g", true)
	require.True(t, p.park(w, seq, time.Now()))
	p.wake(q, []wakeTarget{{"", "eu"}}, 1)
	require.Same(t, w, <-p.ch)

	// The consumer's next pop a, arriving meanwhile, claims eu first.
	a := newJob()
	seqA, k := p.attach(q, "g", true)
	require.Equal(t, []string{"eu"}, k.cands)
	require.Equal(t, []string{"eu"}, p.claimCandidates(a, k.cands))
	require.False(t, a.deferred)
	other := &popJob{call: testCall(), req: domain.PopParams{Queue: q, Group: "h", Max: 1}, deadline: time.Now().Add(time.Hour)}
	require.Equal(t, []string{"eu"}, p.claimCandidates(other, []string{"eu"}), "another group's claim is its own")

	// w finds eu claimed: nothing to try, and it parks.
	seqW, kw := p.attach(q, "g", true)
	require.Empty(t, p.claimCandidates(w, kw.cands))
	require.True(t, w.deferred)
	require.True(t, p.park(w, seqW, time.Time{}))
	require.Equal(t, 1, p.waiting())

	// a leased eu: w stays parked, and the claim is gone.
	p.settleCandidates(q, "g", seqA, []string{"eu"}, []string{"eu"}, true)
	require.Empty(t, p.ch)
	require.Equal(t, 1, p.waiting())
	_, k = p.attach(q, "g", true)
	require.Empty(t, k.cands)

	// Another push names us; a claims it, w defers to it once more, and a
	// leaves us ready (it leased elsewhere): w is retried, hinted at us.
	p.wake(q, []wakeTarget{{"", "us"}}, 1)
	require.Same(t, w, <-p.ch)
	seqA, k = p.attach(q, "g", true)
	require.Equal(t, []string{"us"}, p.claimCandidates(a, k.cands))
	seqW, kw = p.attach(q, "g", true)
	require.Empty(t, p.claimCandidates(w, kw.cands))
	require.True(t, p.park(w, seqW, time.Time{}))
	p.settleCandidates(q, "g", seqA, []string{"us"}, nil, true)
	require.Len(t, p.ch, 1, "w is retried")
	require.Same(t, w, <-p.ch)
	require.Equal(t, "us", w.hint)
	require.False(t, w.deferred)
	require.Equal(t, []string{"us"}, p.claimCandidates(w, []string{"us"}), "the claim was dropped")

	// A pop that deferred and had not parked when the claimer left the
	// partition ready tries again instead of parking.
	late := newJob()
	seqL, kl := p.attach(q, "g", true)
	require.Equal(t, []string{"us"}, kl.cands)
	require.Empty(t, p.claimCandidates(late, kl.cands), "w claims us")
	p.settleCandidates(q, "g", seqW, []string{"us"}, nil, true) // w leaves it ready
	require.True(t, p.park(late, seqL, time.Time{}))
	require.Len(t, p.ch, 1, "queued again at once, not parked")
	require.Same(t, late, <-p.ch)
	require.Equal(t, 0, p.waiting())
	p.stopTimers()
}

// TestWaitingPopsShareAScan: while a waiting pop reads every cursor of a
// group nothing is known of, another waiting pop of the group parks at
// once; it stays parked when the scan found nothing and tries again when
// it found something. Other groups scan for themselves.
func TestWaitingPopsShareAScan(t *testing.T) {
	t.Parallel()
	p := newPopper(&Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}})
	q := domain.Global("q")
	newJob := func(group string) *popJob {
		return &popJob{call: testCall(), req: domain.PopParams{Queue: q, Group: group, Max: 1}, deadline: time.Now().Add(time.Hour)}
	}
	a, b, h := newJob("g"), newJob("g"), newJob("h")
	attachSeq(p, a)
	require.False(t, p.deferToScan(a), "the first scans")
	seqB := attachSeq(p, b)
	require.True(t, p.deferToScan(b), "the second defers")
	require.True(t, b.deferred)
	require.True(t, p.park(b, seqB, time.Time{}))
	attachSeq(p, h)
	require.False(t, p.deferToScan(h), "another group scans for itself")
	p.endScan(h, false)

	p.endScan(a, true)
	require.Empty(t, p.ch, "nothing found: b waits on")
	require.Equal(t, 1, p.waiting())

	c := newJob("g")
	attachSeq(p, c)
	require.False(t, p.deferToScan(c), "no scan in flight")
	p.endScan(c, false)
	require.Len(t, p.ch, 1, "c found something: b tries again")
	require.Same(t, b, <-p.ch)
	require.False(t, b.deferred)
	require.Zero(t, p.waiting())

	// A pop that deferred and had not parked when the scan found
	// something tries again instead of parking.
	d, e := newJob("g"), newJob("g")
	attachSeq(p, d)
	require.False(t, p.deferToScan(d))
	seqE := attachSeq(p, e)
	require.True(t, p.deferToScan(e))
	p.endScan(d, false)
	require.True(t, p.park(e, seqE, time.Time{}))
	require.Same(t, e, <-p.ch)
	require.Zero(t, p.waiting())
	p.stopTimers()
}
