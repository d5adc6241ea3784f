package bridge

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// popJob is one pop request, from its handler to its reply: queued for a
// worker, in a store call, or long-polling among its queue's waiters.
type popJob struct {
	call     *call
	req      domain.PopParams
	deadline time.Time // zero without wait_ms

	// Guarded by popper.mu while the job waits.
	timer *time.Timer
	// hint is a partition a wake-up named when it woke this pop (which
	// names none): the pop tries it first, by its key, before it looks
	// at every partition of its group.
	hint string
	// tries counts the pop's tries; from the second on, it has waited,
	// and its requester may have gone.
	tries int
	// deferred marks a waiting pop that left candidates to the pops
	// claiming them (waitQueue.claims): when one of those is left ready,
	// the claimer's settling retries it (settleCandidates).
	deferred bool
	// admitted marks a pop that the gate let in from its group's line
	// (popgate.go): it holds its place there already.
	admitted bool
	// acks is the end of the reply when the pop carried acks: their
	// results (wire.PopAcks), settled before the pop ran.
	acks []byte
	// ns marks a namespace pop (protocol.VerbNamespacePop). Its
	// req.Queue.Name is then the namespace and its dot, "billing.": no
	// queue's name ends in a dot, so the key of its waiters in
	// popper.queues is apart from every queue's, and a wake-up of a queue
	// finds it by the queue name's prefixes (see wakeNamespacesLocked).
	ns bool
}

// namespace is the namespace a namespace pop's job names.
func (j *popJob) namespace() domain.QueueRef {
	return domain.QueueRef{Tenant: j.req.Queue.Tenant, Name: strings.TrimSuffix(j.req.Queue.Name, ".")}
}

// waitQueue holds the long-polling pops of one queue. It exists while some
// pop of the queue is trying or waiting (refs), so that a wake-up that
// lands between a pop's empty store call and its registration as a waiter
// is not lost: the pop sees seq moved and tries again; and, for one retry
// interval, while it holds marks (empty), which the next pops of their
// groups use (see pruneLocked).
type waitQueue struct {
	seq     uint64
	refs    int
	waiters map[*popJob]struct{}
	// empty is what this bridge knows of each group's ready partitions.
	// A pop naming no partition that found nothing leaves a mark: then
	// no partition was ready, so until the retry interval has passed only
	// the partitions that wake-ups named since (the candidates) can be,
	// and a pop of the group tries those, each by its key, instead of
	// reading every cursor of the group; with no candidate it parks
	// without asking PostgreSQL at all. A wake-up that names no partition
	// (seek, replay, delete, too many partitions) drops the marks, and so
	// does one that would make a group's candidates too many. Messages
	// that become ready without a wake-up (an expired lease) are found at
	// the latest one retry interval later, when the mark has gone stale
	// and a pop reads every cursor again, as a parked pop's retry would.
	empty map[string]*emptyMark
	// claims counts, per group and partition, the candidate pops of
	// waiting pops in flight that try it. A waiting pop leaves a claimed
	// candidate to its claimer: the partition's lease goes to one pop of
	// the group, so a second try finds nothing, and at light load the
	// pop a wake-up retried and the consumer's next pop, arriving during
	// it, went for the same new message, one of them in vain (about 0.75
	// pop statements a message of 1.75 at 1,000 msg/s, docs/benchmarks.md).
	// Claims exist only while their pops are attached.
	claims map[claimKey]int
	// scans counts, per group, the waiting pops in flight that read every
	// cursor of the group with nothing known of it: another waiting pop
	// of the group parks at once instead of reading them too, and is
	// retried if the scan finds anything (deferToScan, endScan). A fresh
	// broker's consumers all start at once; each of them reading every
	// cursor opened and planned a connection apiece (docs/benchmarks.md).
	scans map[string]int
}

// claimKey is a group's candidate partition, claimed.
type claimKey struct{ group, partition string }

// maxCandidates bounds the partitions a group's mark collects before it is
// cheaper to read every cursor once more. A pop of the candidates finds
// each cursor by key in one statement, a few microseconds of PostgreSQL's
// time apiece, where reading every cursor costs that per partition in the
// queue's ready set (store/ready.go: the partitions where some group may
// have messages, not all of them); a wake-up names at most as many.
//
// "Every cursor", here and below, is every cursor of the group in the
// ready set: any other is at its partition's end.
const maxCandidates = maxWakeTargets

// emptyMark is when a group's pop last found nothing, and which partitions
// wake-ups have named since.
//
// A partial mark knows only that its candidates were ready (a pop that
// read every cursor saw more ready partitions than it reports): pops try
// them by key, but a pop that finds none of them ready reads every cursor
// before it waits. Wake-ups add nothing to it (see noteCandidatesLocked).
type emptyMark struct {
	at      time.Time
	cands   []candidate
	partial bool
	// checked marks a mark the safety check made (markCheckedLocked):
	// the next check replaces or drops it, so it holds for two retry
	// intervals, not one, and a pop between two checks never finds it
	// just gone stale.
	checked bool
	// turns counts the pops that took the mark's candidates: each starts
	// at another chunk of them (candidateChunks).
	turns int
}

// fresh reports whether the mark still holds, retry being the retry
// interval.
func (m *emptyMark) fresh(retry time.Duration) bool {
	if m.checked {
		retry *= 2
	}
	return time.Since(m.at) < retry
}

// candidate is a partition a wake-up named, and the wake sequence it was
// last named at.
type candidate struct {
	partition string
	seq       uint64
}

// known is what attach tells a pop of its group: whether a mark holds, and
// its candidates then.
type known struct {
	valid, partial bool
	cands          []string
	turn           int // the mark's turns when the pop took it
}

// candidateChunk is how many candidates one pop statement tries. A pop
// statement reads every candidate it is given, ordered by when each was
// last leased, before it claims one, and concurrent pops of one group
// given the same candidates read the same cursors and skip each other's
// locks. In the closed loop of single-message pushes those statements
// were two thirds of PostgreSQL's time, 1.24 ms each with up to 64
// candidates and 0.54 ms with 8 (pg_stat_statements, docs/benchmarks.md).
const candidateChunk = 8

// candidateChunks cuts cands into chunks of at most size, for the pop
// whose turn it is: concurrent pops of a group start at different chunks,
// so they seldom reach for the same cursors (which SKIP LOCKED makes each
// skip, having read them), and every chunk comes in its turn.
func candidateChunks(cands []string, turn, size int) [][]string {
	if len(cands) == 0 {
		return nil
	}
	n := (len(cands) + size - 1) / size
	first := turn % n
	out := make([][]string, 0, n)
	for i := range n {
		c := (first + i) % n
		out = append(out, cands[c*size:min((c+1)*size, len(cands))])
	}
	return out
}

// popper runs pops on a bounded set of workers and parks long-polling
// pops until a wake-up for their queue, a retry interval, or their
// deadline.
//
// Every pop the bridge holds counts against Config.MaxPops, and the job
// channel has that capacity, so putting a woken waiter back on it never
// blocks.
type popper struct {
	b     *Bridge
	ch    chan *popJob
	gate  *popGate
	count atomic.Int64
	log   wakeLog // the partitions recent wake-ups named

	// storeCalls counts the store calls of pop tries, scans those that
	// read every cursor of their group, checks the safety checks of
	// waiting pops (Stats).
	storeCalls, scans, checks atomic.Int64
	// handoffs counts the waiting pops that pushes answered (handoff.go).
	handoffs atomic.Int64

	mu       sync.Mutex
	queues   map[domain.QueueRef]*waitQueue
	nwait    int
	stopping bool
}

func newPopper(b *Bridge) *popper {
	return &popper{b: b, ch: make(chan *popJob, b.cfg.MaxPops), gate: newPopGate(b.cfg.PopWorkers), queues: map[domain.QueueRef]*waitQueue{}}
}

func (b *Bridge) handlePop(t *tenant, req micro.Request) { b.startPop(t, req, false) }

// handleNamespacePop takes a pop of every queue under a namespace; it
// shares the pop's workers, bounds and long-polling.
func (b *Bridge) handleNamespacePop(t *tenant, req micro.Request) { b.startPop(t, req, true) }

func (b *Bridge) startPop(t *tenant, req micro.Request, ns bool) {
	if req.Reply() == "" {
		// Nobody would receive the messages: leasing them would only hide
		// them until the lease expired.
		return
	}
	queue, err := b.queueOf(t, req)
	if err != nil {
		b.fail(t, req, err)
		return
	}
	decode, verb := wire.DecodePop, protocol.VerbPop
	if ns {
		decode, verb = wire.DecodeNamespacePop, protocol.VerbNamespacePop
		queue.Name += "."
	}
	p, err := decode(req.Data())
	if err != nil {
		b.fail(t, req, err)
		return
	}
	if p.Wait > 0 {
		if err := t.quota.admitLongPoll(); err != nil {
			b.fail(t, req, err)
			return
		}
	}
	c, ok := b.admit(t, req, verb)
	if !ok {
		if p.Wait > 0 {
			t.quota.longPollDone()
		}
		return
	}
	// overloaded refuses the pop once it holds its place among MaxPops.
	overloaded := func() {
		b.pops.count.Add(-1)
		if p.Wait > 0 {
			t.quota.longPollDone()
		}
		b.overloaded(req, c)
	}
	if b.pops.count.Add(1) > int64(b.cfg.MaxPops) {
		overloaded()
		return
	}
	job := &popJob{call: c, req: p.Params, ns: ns}
	job.req.Queue = queue
	// Lease no more than one reply carries: the store gives back the rest.
	job.req.MaxBytes = int(b.nc.MaxPayload()) - len(`{"messages":[]}`)
	job.req.SizeOf = wire.MessageSize
	if p.Wait > 0 {
		job.deadline = time.Now().Add(p.Wait)
	}
	if len(p.Acks) == 0 {
		b.pops.ch <- job // never blocks: see popper
		return
	}
	// The acks first, with the ack requests of the moment (ackWorker);
	// then the pop, which may find what they freed.
	acks := &ackJob{call: c, req: domain.AckParams{Queue: queue, Group: job.req.Group, Acks: p.Acks},
		then: func(out domain.AckOutcome) { b.pops.acked(job, out, len(p.Acks)) }}
	select {
	case b.ackCh <- acks:
	default:
		overloaded()
	}
}

// acked goes on with a pop whose n acks were settled (out): it answers an
// error, or runs the pop, whose reply ends with the acks' results.
func (p *popper) acked(job *popJob, out domain.AckOutcome, n int) {
	if out.Err == nil && len(out.Results) != n {
		out.Err = errResultCount
	}
	if out.Err == nil {
		job.acks = wire.PopAcks(out.Results)
		job.req.MaxBytes -= len(job.acks)
		if job.req.MaxBytes >= minPopRoom {
			p.ch <- job // never blocks: see popper
			return
		}
	}
	// An error, or results that fill the reply (a small max_payload):
	// that is the answer, without a pop whose messages could not follow.
	p.answer(job, nil, out.Err)
}

// answer ends a pop with its reply (msgs) or err. A long poll's place is
// freed first, so that a client that polls again at once finds it free.
func (p *popper) answer(job *popJob, msgs []domain.Message, err error) {
	if !job.deadline.IsZero() {
		job.call.t.quota.longPollDone()
	}
	if err != nil {
		p.b.respondError(job.call, err)
	} else {
		p.reply(job, msgs)
	}
	p.count.Add(-1)
	p.b.finish(job.call)
}

// minPopRoom is the least room a pop that carried acks needs left in its
// reply, after their results, to look for messages.
const minPopRoom = 1024

func (p *popper) worker() {
	defer p.b.wg.Done()
	for {
		select {
		case job := <-p.ch:
			p.runGated(job)
		case <-p.b.quit:
			return
		}
	}
}

// runGated runs job through its group's gate (popgate.go): at once, or,
// when its group's pops are at their limit, later, from the line.
func (p *popper) runGated(job *popJob) {
	if !gated(job) {
		p.run(job)
		return
	}
	if job.admitted {
		job.admitted = false // let in by leave, which counted it
	} else if !p.gate.enter(job) {
		return
	}
	k := keyOf(job)
	fill := p.run(job)
	for _, next := range p.gate.leave(k, fill) {
		next.admitted = true
		p.ch <- next // never blocks: see popper
	}
}

// run makes one try of a pop: it answers, or parks the pop as a waiter.
// It returns how full what it found left the pop (popFill).
func (p *popper) run(job *popJob) popFill {
	waits := !job.deadline.IsZero()
	job.tries++
	job.deferred = false
	if waits && job.tries > 1 && p.gone(job) {
		// Nobody would receive what it leased: the messages would stay
		// hidden from every other consumer until the lease expired.
		job.call.t.quota.longPollDone()
		p.count.Add(-1)
		p.b.finish(job.call)
		return fillNone
	}
	// A pop that waits attaches to its queue; so does one of a queue that
	// names no partition, to use and leave what the bridge knows of its
	// group's ready partitions (waitQueue.empty).
	anyPartition := job.req.Partition == "" && !job.ns
	attached := waits || anyPartition
	var seq uint64
	var k known
	if attached {
		seq, k = p.attach(job.req.Queue, job.req.Group, anyPartition)
		if waits && k.valid && !k.partial && len(k.cands) == 0 {
			// Nothing can be ready: wait on, or, at the deadline, answer
			// that nothing came without asking PostgreSQL again.
			if time.Now().Before(job.deadline) && p.park(job, seq, time.Time{}) {
				return fillNone
			}
			if !time.Now().Before(job.deadline) {
				p.detach(job.req.Queue)
				p.answer(job, nil, nil)
				return fillNone
			}
		}
	}
	var msgs []domain.Message
	var err error
	began := time.Now()
	tried := began
	if p.b.maintenance.Load() {
		err = errMaintenance // nothing may read PostgreSQL
	} else if k.valid && len(k.cands) > 0 {
		// Only the candidates can be ready (or, under a partial mark,
		// are known to be): try them by key, a chunk a statement (at
		// least twice the partitions the pop may lease), until one
		// leases something. Finding nothing keeps a full mark (no new
		// one: no cursor was read); under a partial one, every cursor
		// is read next. What a concurrent pop held locked and left
		// ready comes back by its wake-up (wakeKept). A pop that waits
		// under a full mark leaves the candidates that other such pops
		// are trying to them (waitQueue.claims), and parks when that
		// leaves it nothing; one that does not wait, or under a partial
		// mark, tries them all.
		job.hint, began = "", time.Time{}
		claim := waits && !k.partial
		for _, chunk := range candidateChunks(k.cands, k.turn, max(candidateChunk, 2*job.req.Partitions)) {
			if msgs, err = p.popCandidates(job, seq, chunk, claim); err != nil || len(msgs) > 0 {
				break
			}
		}
		if err == nil && len(msgs) == 0 && (k.partial || !waits) {
			// Other partitions may be ready; and a pop that does not
			// wait answers that nothing is ready only once it has read
			// every cursor (a lease may have expired meanwhile).
			began = time.Now()
			msgs, err = p.popAll(job, attached, began)
		}
	} else if waits && anyPartition && !k.valid {
		// Nothing is known of the group: one waiting pop reads every
		// cursor, the others wait on its outcome.
		if p.deferToScan(job) {
			if p.park(job, seq, time.Time{}) {
				return fillNone
			}
		} else {
			msgs, err = p.popAll(job, attached, began)
			p.endScan(job, err == nil && len(msgs) == 0)
		}
	} else {
		msgs, err = p.popAll(job, attached, began)
	}
	if job.ns {
		began = time.Time{} // no empty marks: they are per queue
	}
	if p.b.obs != nil {
		p.b.obs.PopTx(time.Since(tried), job.req.Queue, len(msgs))
	}
	if err == nil && len(msgs) == 0 && waits && time.Now().Before(job.deadline) && p.park(job, seq, began) {
		return fillNone
	}
	if attached {
		p.detach(job.req.Queue)
	}
	fill := fillNone
	if err == nil {
		fill = fillOf(job.req, msgs)
	}
	p.answer(job, msgs, err)
	return fill
}

// gone reports whether a waiting pop's requester has stopped listening
// for the reply (it timed out, or its connection closed).
func (p *popper) gone(job *popJob) bool {
	t := job.call.t
	if t.interest == nil || t.interest(job.call.reply) {
		return false
	}
	p.b.log.Debug("pop: the requester is gone; dropped before leasing", "tenant", t.name, "queue", job.req.Queue.Name)
	return true
}

// pop makes the store call of one try: the partition a wake-up hinted at
// first, when the job has a hint and leases one partition, then, if that
// found nothing, the group's ready partitions. A woken pop at light load
// thus reads one cursor instead of all of them.
func (p *popper) pop(job *popJob) (domain.PopResult, error) {
	ctx, cancel := p.b.storeCtx()
	defer cancel()
	p.storeCalls.Add(1)
	if job.ns {
		req := job.req
		req.Queue = job.namespace()
		msgs, err := p.b.st.PopNamespace(ctx, req)
		return domain.PopResult{Messages: msgs}, err
	}
	if hint := job.hint; hint != "" {
		job.hint = ""
		if job.req.Partition == "" && job.req.Partitions <= 1 {
			req := job.req
			req.Partition = hint
			p.storeCalls.Add(1)
			if res, err := p.b.st.PopReport(ctx, req); err == nil && len(res.Messages) > 0 {
				// What it gave back is Kept (wakeKept); what it reports
				// ready of one partition teaches the marks nothing.
				return domain.PopResult{Messages: res.Messages, Kept: res.Kept}, nil
			}
		}
	}
	if job.req.Partition == "" {
		p.scans.Add(1)
	}
	return p.b.st.PopReport(ctx, job.req)
}

// popAll makes a store call that may read every cursor of the group (after
// a hint, see pop) and learns from what it reports: attached says the job
// has attached to its queue, began is when the call began.
func (p *popper) popAll(job *popJob, attached bool, began time.Time) ([]domain.Message, error) {
	res, err := p.pop(job)
	p.wakeKept(job, res)
	if err == nil && attached && len(res.Messages) > 0 && (res.ReadyKnown || len(res.Ready) > 0) {
		p.learn(job, began, stillReady(job, res), !res.ReadyKnown)
	}
	return res.Messages, err
}

// stillReady is what a pop that leased something leaves ready: the
// partitions it reported ready and did not lease and, for a pop with
// auto-ack, the partitions it delivered from. Those have no lease after
// it, and may hold more than it took (its max, or its bytes, ran out):
// no ack will come to wake their pops, so they stay candidates until a
// pop finds them empty.
func stillReady(job *popJob, res domain.PopResult) []string {
	if !job.req.AutoAck {
		return res.Ready
	}
	out := slices.Clone(res.Ready)
	for _, m := range res.Messages {
		if !slices.Contains(out, m.Partition) {
			out = append(out, m.Partition)
		}
	}
	return out
}

// learn marks job's group as known when a pop that read every cursor of
// the group leased something and saw all the other ready partitions
// (ready) as its statement began, which was after began: from then on only
// those, and those wake-ups named since began, can be ready, until the
// retry interval has passed. Too many of them make a partial mark of the
// first. With partial, ready are only some of the ready partitions: the
// mark is partial (see emptyMark).
func (p *popper) learn(job *popJob, began time.Time, ready []string, partial bool) {
	if job.ns || job.req.Partition != "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if wq := p.queues[job.req.Queue]; wq != nil {
		p.markLocked(wq, job.req.Queue, job.req.Group, &emptyMark{at: began, partial: partial}, ready)
	}
}

// markLocked leaves m as group's mark, with candidates parts and the
// partitions that wake-ups named since m.at, unless a wake-up since named
// every partition (then it leaves the marks as they are: that wake-up
// dropped them). Too many candidates to try by key keep the first (the
// least recently leased) as a partial mark, whose pops read every cursor
// before they take the group for empty.
func (p *popper) markLocked(wq *waitQueue, queue domain.QueueRef, group string, m *emptyMark, parts []string) {
	named, all := p.log.namedAfter(queue, m.at)
	if all {
		return
	}
	for _, part := range slices.Concat(parts, named) {
		if !slices.ContainsFunc(m.cands, func(c candidate) bool { return c.partition == part }) {
			m.cands = append(m.cands, candidate{part, wq.seq})
		}
	}
	if len(m.cands) > maxCandidates {
		m.cands, m.partial = m.cands[:maxCandidates], true
	}
	wq.empty[group] = m
}

// popCandidates pops a known group from its candidate partitions only, in
// one store call that finds their cursors by key. It then forgets every
// candidate the store did not report still ready (leased now, or found
// empty or held by another pop), or all of them when it leased nothing;
// but it keeps each that a wake-up named again after seq, which may be
// ready again. With claim, it first leaves out the candidates other
// waiting pops of the group are trying (claimCandidates), and makes no
// store call when none is left.
func (p *popper) popCandidates(job *popJob, seq uint64, cands []string, claim bool) (msgs []domain.Message, err error) {
	if claim {
		if cands = p.claimCandidates(job, cands); len(cands) == 0 {
			return nil, nil
		}
	}
	var done []string // forgotten once the call has settled
	defer func() { p.settleCandidates(job.req.Queue, job.req.Group, seq, cands, done, claim) }()
	ctx, cancel := p.b.storeCtx()
	defer cancel()
	req := job.req
	if len(cands) == 1 && req.Partitions <= 1 {
		// One cursor by its key, without the scan's sort and report:
		// 0.14 ms of PostgreSQL against 0.21 for a scan of one candidate
		// (EXPLAIN ANALYZE), and most chunks at light load are one.
		req.Partition = cands[0]
	} else {
		req.Candidates = cands
	}
	p.storeCalls.Add(1)
	res, err := p.b.st.PopReport(ctx, req)
	if err != nil {
		return nil, err
	}
	p.wakeKept(job, res)
	done = cands
	if len(res.Messages) > 0 {
		// What it did not report ready it leased, or found empty. Under
		// auto-ack, what it leased is settled at once and its partition
		// may hold more (see stillReady).
		still := stillReady(job, res)
		done = slices.DeleteFunc(slices.Clone(cands), func(c string) bool { return slices.Contains(still, c) })
	}
	return res.Messages, nil
}

// claimCandidates returns those of cands that no other waiting pop of
// job's group is trying, and claims them for job; it marks job deferred
// when it left any out.
func (p *popper) claimCandidates(job *popJob, cands []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	wq := p.queues[job.req.Queue] // job is attached: it exists
	var mine []string
	for _, c := range cands {
		k := claimKey{job.req.Group, c}
		if wq.claims[k] > 0 {
			job.deferred = true
			continue
		}
		wq.claims[k]++
		mine = append(mine, c)
	}
	return mine
}

// settleCandidates ends a candidate pop of group: it forgets done
// (forgetCandidates) and, when the pop had claimed tried, drops those
// claims and retries, for each of them still a candidate (left ready, or
// named again since seq), a waiter that deferred to the claim, hinted at
// that partition; a deferring pop not parked yet retries too (park sees
// the wake sequence moved).
func (p *popper) settleCandidates(queue domain.QueueRef, group string, seq uint64, tried, done []string, claimed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgetCandidatesLocked(queue, group, seq, done)
	if !claimed {
		return
	}
	wq := p.queues[queue]
	for _, c := range tried {
		k := claimKey{group, c}
		if wq.claims[k]--; wq.claims[k] <= 0 {
			delete(wq.claims, k)
		}
	}
	m := wq.empty[group]
	if m == nil {
		return
	}
	for _, c := range tried {
		if !slices.ContainsFunc(m.cands, func(x candidate) bool { return x.partition == c }) {
			continue
		}
		// A pop that deferred and has not parked yet sees seq moved and
		// tries again instead of parking.
		wq.seq++
		for job := range wq.waiters {
			if job.deferred && job.req.Group == group && job.req.Partition == "" {
				job.deferred, job.hint = false, c
				p.unparkLocked(wq, job)
				break
			}
		}
	}
}

// deferToScan reports whether another waiting pop of job's group is
// reading every cursor of it (job then defers to it: see waitQueue.scans);
// if not, job's own scan is counted until endScan.
func (p *popper) deferToScan(job *popJob) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	wq := p.queues[job.req.Queue] // job is attached: it exists
	if wq.scans[job.req.Group] > 0 {
		job.deferred = true
		return true
	}
	wq.scans[job.req.Group]++
	return false
}

// endScan ends job's scan. Unless it found nothing (empty), which its
// own parking marks, the waiters that deferred to it try again.
func (p *popper) endScan(job *popJob, empty bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wq := p.queues[job.req.Queue]
	g := job.req.Group
	if wq.scans[g]--; wq.scans[g] <= 0 {
		delete(wq.scans, g)
	}
	if empty {
		return
	}
	wq.seq++ // a deferring pop not parked yet tries again
	for w := range wq.waiters {
		if w.deferred && w.req.Group == g && w.req.Partition == "" && !w.ns {
			w.deferred = false
			p.unparkLocked(wq, w)
		}
	}
}

// wakeKept wakes the pops of the job's group, on every bridge, for the
// partitions its pop held locked and left ready (PopResult.Kept). A
// concurrent pop skipped them as locked: having leased nothing, it forgot
// its candidates, or took the group for empty, and nothing else would
// say they are ready until a mark's retry interval. With pops of several
// partitions tried from candidates, closed-loop runs had a max e2e of
// that interval (0.92-1.04 s) until this wake-up (docs/benchmarks.md).
// The wake-up comes back to this bridge too, after the forgetting.
func (p *popper) wakeKept(job *popJob, res domain.PopResult) {
	if len(res.Kept) == 0 || job.ns {
		return
	}
	w := &wakeSet{}
	for _, part := range res.Kept {
		w.add(job.req.Queue, job.req.Group, part)
	}
	p.b.publishWakes(w)
}

// forgetCandidates drops done from group's candidates, but keeps each that
// a wake-up named again after seq: it may be ready again.
func (p *popper) forgetCandidates(queue domain.QueueRef, group string, seq uint64, done []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgetCandidatesLocked(queue, group, seq, done)
}

func (p *popper) forgetCandidatesLocked(queue domain.QueueRef, group string, seq uint64, done []string) {
	m := p.queues[queue].empty[group]
	if m == nil {
		return
	}
	m.cands = slices.DeleteFunc(m.cands, func(c candidate) bool {
		return c.seq <= seq && slices.Contains(done, c.partition)
	})
}

// noteCandidatesLocked adds the partitions a wake-up named to the marks of
// the groups they concern, and drops the marks it cannot keep.
func (p *popper) noteCandidatesLocked(wq *waitQueue, targets []wakeTarget) {
	if targets == nil {
		clear(wq.empty)
		return
	}
	for g, m := range wq.empty {
		if m.partial {
			// Its candidates are the least recently leased of many ready
			// partitions. Adding the ones just pushed to would have pops
			// serve those first, and leave older ready partitions waiting
			// until the mark ends; when its candidates run out, a pop
			// reads every cursor, oldest first, and finds these too.
			continue
		}
		for _, t := range targets {
			if t.group != "" && t.group != g {
				continue
			}
			i := slices.IndexFunc(m.cands, func(c candidate) bool { return c.partition == t.partition })
			if i < 0 {
				m.cands = append(m.cands, candidate{t.partition, wq.seq})
			} else {
				m.cands[i].seq = wq.seq
			}
		}
		if len(m.cands) > maxCandidates {
			delete(wq.empty, g)
		}
	}
}

// replyPool keeps pop replies' buffers: allocating and zeroing one of
// 150 KB for every pop of the reference shape was a tenth of the broker's
// CPU with the collection it caused (BenchmarkPopReplyParallel: it
// shared the heap's lock too). Buffers past maxPooledReply go to the
// collector.
var replyPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

const maxPooledReply = 4 << 20

// reply sends the messages. The store leased no more than fit in one NATS
// message (MaxBytes), but for one message alone too large; the trimming
// here is a second guard, should the server's max_payload have shrunk.
func (p *popper) reply(job *popJob, msgs []domain.Message) {
	limit := int(p.b.nc.MaxPayload())
	buf := replyPool.Get().(*[]byte)
	data, n := wire.AppendPopReply((*buf)[:0], msgs, limit-len(job.acks))
	data = wire.AppendPopAcks(data, job.acks)
	defer func() {
		// Publish copied the reply into the connection's buffer.
		if cap(data) <= maxPooledReply {
			*buf = data[:0]
			replyPool.Put(buf)
		}
	}()
	if n < len(msgs) {
		if n == 0 {
			m := msgs[0]
			p.b.log.Warn("pop: message too large for a NATS reply; raise max_payload", "queue", job.req.Queue,
				"partition", m.Partition, "offset", m.Offset, "bytes", len(m.Data), "max_payload", limit)
			p.b.respondError(job.call, protocol.Errorf(protocol.CodeTooLarge,
				"message %s/%d (%d bytes) does not fit in a reply under the NATS server's max_payload of %d bytes",
				m.Partition, m.Offset, len(m.Data), limit))
			return
		}
		p.b.log.Debug("pop: reply trimmed to max_payload", "queue", job.req.Queue, "sent", n, "leased", len(msgs))
	}
	if p.b.obs != nil && n > 0 {
		p.observePopped(job, msgs[:n])
	}
	p.b.respond(job.call, data)
}

// observePopped tells the observer what a reply carries, per queue: a
// namespace pop's messages come in runs of one queue each.
func (p *popper) observePopped(job *popJob, msgs []domain.Message) {
	if !job.ns {
		p.b.obs.Popped(job.req.Queue, msgs)
		return
	}
	for len(msgs) > 0 {
		n := 1
		for n < len(msgs) && msgs[n].Queue == msgs[0].Queue {
			n++
		}
		p.b.obs.Popped(domain.QueueRef{Tenant: job.req.Queue.Tenant, Name: msgs[0].Queue}, msgs[:n])
		msgs = msgs[n:]
	}
}

// attach notes that a pop of queue is trying, and returns the queue's wake
// sequence as it was before the try, and whether a pop of group naming no
// partition (anyPartition) is known to find nothing now (see
// waitQueue.empty).
func (p *popper) attach(queue domain.QueueRef, group string, anyPartition bool) (seq uint64, k known) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wq := p.attachLocked(queue)
	if m, ok := wq.empty[group]; anyPartition && ok && m.fresh(p.b.cfg.RetryInterval) {
		k.valid, k.partial, k.turn = true, m.partial, m.turns
		m.turns++
		for _, c := range m.cands {
			k.cands = append(k.cands, c.partition)
		}
	}
	return wq.seq, k
}

// attachLocked notes that a pop of queue is trying, and returns the queue.
func (p *popper) attachLocked(queue domain.QueueRef) *waitQueue {
	wq := p.queues[queue]
	if wq == nil {
		wq = &waitQueue{waiters: map[*popJob]struct{}{}, empty: map[string]*emptyMark{}, claims: map[claimKey]int{}, scans: map[string]int{}}
		p.queues[queue] = wq
	}
	wq.refs++
	return wq
}

// detach undoes attach, dropping the queue's entry when nobody is left.
// The lock must not be held.
func (p *popper) detach(queue domain.QueueRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.detachLocked(queue)
}

func (p *popper) detachLocked(queue domain.QueueRef) {
	wq := p.queues[queue]
	wq.refs--
	if wq.refs == 0 && len(wq.empty) == 0 {
		delete(p.queues, queue)
	}
}

// pruneLocked drops the marks that have gone stale from the queues that
// no pop uses, and those queues once they have none: marks outlive the
// pops that made them (the next pop of the group uses them), for one
// retry interval.
func (p *popper) pruneLocked() {
	for q, wq := range p.queues {
		if wq.refs > 0 {
			continue
		}
		for g, m := range wq.empty {
			if !m.fresh(p.b.cfg.RetryInterval) {
				delete(wq.empty, g)
			}
		}
		if len(wq.empty) == 0 {
			delete(p.queues, q)
		}
	}
}

// park makes job a waiter of its queue, unless a wake-up came since seq
// (then it is queued to try again at once) or the bridge is stopping
// (then it reports false and the caller answers). A parked job keeps the
// reference attach took. began, when set, is when the store call that
// found nothing began: a pop naming no partition then marks its group
// empty.
func (p *popper) park(job *popJob, seq uint64, began time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return false
	}
	wq := p.queues[job.req.Queue]
	if wq.seq != seq {
		p.detachLocked(job.req.Queue)
		p.ch <- job
		return true
	}
	if !began.IsZero() && job.req.Partition == "" {
		wq.empty[job.req.Group] = &emptyMark{at: began}
	}
	wq.waiters[job] = struct{}{}
	job.call.waited = true
	p.nwait++
	job.call.t.waiting.Add(1)
	// A queue's waiter waits for a wake-up, the safety check (checkWaiters)
	// or its deadline; a namespace pop, which no check covers, tries again
	// every retry interval.
	d := time.Until(job.deadline)
	if job.ns {
		d = min(d, p.b.cfg.RetryInterval)
	}
	job.timer = time.AfterFunc(d, func() { p.expire(job) })
	return true
}

// unparkLocked removes a waiter and queues it for another try.
func (p *popper) unparkLocked(wq *waitQueue, job *popJob) {
	p.takeLocked(wq, job)
	p.detachLocked(job.req.Queue)
	p.ch <- job
}

// takeLocked removes a waiter; it stays attached to its queue.
func (p *popper) takeLocked(wq *waitQueue, job *popJob) {
	delete(wq.waiters, job)
	p.nwait--
	job.call.t.waiting.Add(-1)
	if job.timer != nil {
		job.timer.Stop()
		job.timer = nil
	}
}

// expire retries a waiter whose retry interval or deadline has come.
func (p *popper) expire(job *popJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wq := p.queues[job.req.Queue]
	if wq == nil {
		return
	}
	if _, ok := wq.waiters[job]; ok {
		p.unparkLocked(wq, job)
	}
}

// wake makes pops of queue that are trying right now try again before
// they wait, and retries the waiters that targets may satisfy: per group,
// waiters without a partition until their pops' partitions cover the
// partitions targets name for that group or for every group, and every
// waiter whose partition is named. A nil targets retries every waiter.
//
// A count (messages made ready for every group; 0 when unknown) bounds the
// waiters without a partition that are retried: per group, until their
// pops' max adds up to the count.
func (p *popper) wake(queue domain.QueueRef, targets []wakeTarget, count int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Logged whether or not this bridge has pops of the queue waiting: an
	// ack here may free a partition that a pop on another bridge found
	// leased.
	now := time.Now()
	if targets == nil {
		p.log.add(queue, "", now)
	}
	for _, t := range targets {
		p.log.add(queue, t.partition, now)
	}
	p.wakeNamespacesLocked(queue, targets, count)
	wq := p.queues[queue]
	if wq == nil {
		return
	}
	wq.seq++
	p.noteCandidatesLocked(wq, targets)
	if count > 0 {
		p.wakeCountLocked(wq, targets, count)
		return
	}
	if targets == nil {
		for job := range wq.waiters {
			p.unparkLocked(wq, job)
		}
		return
	}
	// Per group, how many waiters without a partition to try; which
	// (group, partition) pairs were named; and the partitions to hint at.
	budget := map[string]int{}
	anyGroup := 0
	named := make(map[wakeTarget]struct{}, len(targets))
	hints := map[string][]string{} // by group; "" for every group
	for _, t := range targets {
		if t.group == "" {
			anyGroup++
		} else {
			budget[t.group]++
		}
		named[t] = struct{}{}
		hints[t.group] = append(hints[t.group], t.partition)
	}
	for job := range wq.waiters {
		g, part := job.req.Group, job.req.Partition
		if part != "" {
			_, forAll := named[wakeTarget{"", part}]
			_, forGroup := named[wakeTarget{g, part}]
			if forAll || forGroup {
				p.unparkLocked(wq, job)
			}
			continue
		}
		if budget[g]+anyGroup > 0 {
			// One pop may lease several partitions: it covers that many
			// of the named ones.
			budget[g] -= max(job.req.Partitions, 1)
			job.hint = nextHint(hints, g)
			p.unparkLocked(wq, job)
		}
	}
}

// wakeNamespacesLocked retries the namespace pops that queue is under: for
// a.b.c, those of the namespaces a and a.b, which wait under the keys "a."
// and "a.b." (see popJob.ns). The queue need not have existed when they
// began to wait. Every waiter is retried, except that targets that all
// name a group (an ack's) retry only those groups' waiters, and a count
// (messages made ready) bounds them per group as in wakeCountLocked. The
// targets' partitions do not narrow it down further: a namespace pop's
// partitions belong to many queues.
func (p *popper) wakeNamespacesLocked(queue domain.QueueRef, targets []wakeTarget, count int) {
	var groups map[string]bool // nil: every group
	for _, t := range targets {
		if t.group == "" {
			groups = nil
			break
		}
		if groups == nil {
			groups = map[string]bool{}
		}
		groups[t.group] = true
	}
	for i := range len(queue.Name) {
		if queue.Name[i] != '.' {
			continue
		}
		wq := p.queues[domain.QueueRef{Tenant: queue.Tenant, Name: queue.Name[:i+1]}]
		if wq == nil {
			continue
		}
		wq.seq++
		left := map[string]int{}
		for job := range wq.waiters {
			if groups != nil && !groups[job.req.Group] {
				continue
			}
			if count > 0 {
				budget, seen := left[job.req.Group]
				if !seen {
					budget = count
				}
				if budget <= 0 {
					continue
				}
				left[job.req.Group] = budget - cmp.Or(job.req.Max, protocol.DefaultPopMax)
			}
			p.unparkLocked(wq, job)
		}
	}
}

// wakeCountLocked retries, per group, waiters without a partition until
// their max covers count messages, and the waiters whose partition targets
// name (all of them when targets is nil).
func (p *popper) wakeCountLocked(wq *waitQueue, targets []wakeTarget, count int) {
	named := make(map[string]struct{}, len(targets))
	var parts []string
	for _, t := range targets {
		if _, dup := named[t.partition]; !dup {
			parts = append(parts, t.partition)
		}
		named[t.partition] = struct{}{}
	}
	next := map[string]int{} // per group: the next partition to hint at
	left := map[string]int{}
	for job := range wq.waiters {
		if part := job.req.Partition; part != "" {
			if _, ok := named[part]; ok || targets == nil {
				p.unparkLocked(wq, job)
			}
			continue
		}
		g := job.req.Group
		budget, seen := left[g]
		if !seen {
			budget = count
		}
		if budget <= 0 {
			continue
		}
		take := job.req.Max
		if take <= 0 {
			take = protocol.DefaultPopMax
		}
		left[g] = budget - take
		if len(parts) > 0 {
			job.hint = parts[next[g]%len(parts)]
			next[g]++
		}
		p.unparkLocked(wq, job)
	}
}

// nextHint takes the next partition named for group g, or for every group.
func nextHint(hints map[string][]string, g string) string {
	for _, k := range []string{g, ""} {
		if h := hints[k]; len(h) > 0 {
			hints[k] = h[1:]
			return h[0]
		}
	}
	return ""
}

// stop makes every waiter try once more and answer, and every later try
// answer whatever it finds.
// checker runs the safety check of parked pops every retry interval.
func (p *popper) checker() {
	defer p.b.wg.Done()
	t := time.NewTicker(p.b.cfg.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.checkWaiters()
		case <-p.b.quit:
			return
		}
	}
}

// checkWaiters is the safety net of parked pops: messages that became
// ready with no wake-up (a lease expired, a wake-up was lost) are found
// here, within one retry interval. It asks PostgreSQL once for every
// group and partition that pops wait on (Store.AnyReady), whatever the
// number of queues and waiters, and retries the waiters of those that
// may have messages. A group found with nothing ready is marked as known
// to be empty, as a pop that found nothing marks it, so that its next
// pops and its waiters' deadlines cost no query. Namespace pops retry on
// their own timers.
func (p *popper) checkWaiters() {
	type key struct {
		queue            domain.QueueRef
		group, partition string
	}
	p.mu.Lock()
	p.pruneLocked()
	var checks []domain.ReadyCheck
	seen := map[key]bool{}
	for q, wq := range p.queues {
		for job := range wq.waiters {
			k := key{q, job.req.Group, job.req.Partition}
			if job.ns || seen[k] {
				continue
			}
			seen[k] = true
			checks = append(checks, domain.ReadyCheck{Queue: q, Group: k.group, Partition: k.partition})
		}
	}
	p.mu.Unlock()
	if len(checks) == 0 {
		return
	}
	began := time.Now()
	var ready []bool
	var err error
	if p.b.maintenance.Load() {
		err = errMaintenance // nothing may read PostgreSQL: the waiters answer so
	} else {
		ctx, cancel := p.b.storeCtx()
		p.checks.Add(1)
		ready, err = p.b.st.AnyReady(ctx, checks)
		cancel()
	}
	if err != nil && !errors.Is(err, errMaintenance) {
		p.b.log.Warn("pop: safety check of waiting pops failed; they try again themselves", "waiting", len(checks), "err", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range checks {
		wq := p.queues[c.Queue]
		if wq == nil {
			continue
		}
		if err == nil && !ready[i] {
			if c.Partition == "" {
				p.markCheckedLocked(wq, c.Queue, c.Group, began)
			}
			continue
		}
		if c.Partition == "" {
			delete(wq.empty, c.Group) // it may know too little now
		}
		for job := range wq.waiters {
			if !job.ns && job.req.Group == c.Group && job.req.Partition == c.Partition {
				p.unparkLocked(wq, job)
			}
		}
	}
}

// markCheckedLocked marks group as known to have nothing ready as of
// began, when the safety check found nothing: only the partitions wake-ups
// named since, or that its mark still held, can be ready (markLocked).
func (p *popper) markCheckedLocked(wq *waitQueue, queue domain.QueueRef, group string, began time.Time) {
	var kept []string
	if old := wq.empty[group]; old != nil {
		if old.at.After(began) {
			return // it knows more than the check
		}
		for _, c := range old.cands {
			kept = append(kept, c.partition)
		}
	}
	p.markLocked(wq, queue, group, &emptyMark{at: began, checked: true}, kept)
}

func (p *popper) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopping = true
	for _, wq := range p.queues {
		wq.seq++
		for job := range wq.waiters {
			p.unparkLocked(wq, job)
		}
	}
}

// stopTimers stops timers left by a Stop that gave up waiting.
func (p *popper) stopTimers() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, wq := range p.queues {
		for job := range wq.waiters {
			if job.timer != nil {
				job.timer.Stop()
			}
		}
	}
}

// waiting returns how many pops are long-polling.
func (p *popper) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nwait
}
