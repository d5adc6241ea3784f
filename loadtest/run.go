package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrVerifyFailed is returned by Run, with the summary, when verification
// found a message missing, out of order or corrupt.
var ErrVerifyFailed = errors.New("verification failed")

// ErrInvalidConfig is returned by Run, wrapped with every problem found,
// when the configuration does not validate.
var ErrInvalidConfig = errors.New("invalid configuration")

// interruptedDrain bounds the drain after the caller cancelled Run's
// context: a person pressing Ctrl-C wants the figures now.
const interruptedDrain = 5 * time.Second

// backend is a system under load: Comb, or JetStream for comparison.
type backend interface {
	// push sends payloads to partition part as one request, with the
	// producer ids ids names (none when it is off); nil means every
	// message is durably stored. dups counts the messages answered
	// duplicate (stored earlier under the same id), which only ids make
	// possible.
	push(ctx context.Context, part int, payloads [][]byte, ids msgIDs) (dups int, err error)
	// consume runs consumer id's pop loop until ctx is done, handing every
	// batch to r.deliver and its ack to r.settle.
	consume(ctx context.Context, id int, r *runner)
	// brokerPID is the broker's process id for the sampler, 0 if unknown.
	brokerPID() int
	// describe says what the loader talks to, for the configuration line.
	describe() string
	// close releases connections and, for an embedded broker, stops it.
	close()
}

// msgIDs names the messages of one push request for deduplication:
// message j's producer id is "<run>-<producer>-<partition>-<seq>" in base
// 36, seq being first+j, the message's sequence in its (producer,
// partition) stream. The zero value sends no ids.
//
// The sequence makes an id unique within its stream; producer and
// partition make it unique within the run, so it holds wherever the
// target looks duplicates up: Comb per partition, JetStream per stream
// (all partitions); the random run keeps a second run on the same queue
// inside the window from colliding with the first. Base 36 keeps an id
// short (at most 37 bytes, usually under 20): it is stored and indexed
// once per message.
type msgIDs struct {
	set       bool // false: no ids
	run       uint32
	producer  uint32
	partition uint32
	first     uint64
}

func (m msgIDs) on() bool { return m.set }

// appendID appends message j's id to b.
func (m msgIDs) appendID(b []byte, j int) []byte {
	b = strconv.AppendUint(b, uint64(m.run), 36)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(m.producer), 36)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(m.partition), 36)
	b = append(b, '-')
	return strconv.AppendUint(b, m.first+uint64(j), 36)
}

// id returns message j's id.
func (m msgIDs) id(j int) string { return string(m.appendID(make([]byte, 0, 40), j)) }

// Summary is the outcome of Run: one result per target run.
type Summary struct {
	Runs []Result `json:"runs"`
}

// OK reports whether every run's verification passed.
func (s Summary) OK() bool {
	for _, r := range s.Runs {
		if !r.Verdict.OK() {
			return false
		}
	}
	return true
}

// Result is the outcome of one target's run.
type Result struct {
	// Label names the run: comb, jetstream-default or jetstream-always.
	Label  string `json:"label"`
	Target Target `json:"target"`
	// Sync is the JetStream sync policy, empty for Comb.
	Sync JetStreamSync `json:"sync,omitempty"`
	// Settings is the workload as run.
	Settings Settings `json:"settings"`
	// Start is when the producers started.
	Start time.Time `json:"start"`
	// Elapsed is how long the producers ran; Drained how long the drain
	// after them took.
	Elapsed float64 `json:"elapsed_s"`
	Drained float64 `json:"drained_s"`
	// Interrupted is true when Run's context was cancelled before the
	// planned duration.
	Interrupted bool   `json:"interrupted"`
	Counts      Counts `json:"counts"`
	// PushRate and PopRate are messages per second over Elapsed: pushed,
	// and popped during the producing time.
	PushRate float64 `json:"push_rate"`
	PopRate  float64 `json:"pop_rate"`
	// Latency is end-to-end over the whole run, drain included.
	Latency  Percentiles `json:"latency"`
	AckRTTMs float64     `json:"ack_rtt_avg_ms"`
	PushRTT  float64     `json:"push_rtt_avg_ms"`
	Verdict  Verdict     `json:"verdict"`
	// Resources are the sampler's medians after the first fifth of the
	// run, and the broker's largest resident memory.
	Resources Resources `json:"resources"`
}

// Settings is the part of Config that shapes the workload, as recorded in
// the summary.
type Settings struct {
	Mode               Mode     `json:"mode"`
	Queue              string   `json:"queue"`
	Partitions         int      `json:"partitions"`
	Consumers          int      `json:"consumers"`
	ManualAck          bool     `json:"manual_ack"`
	AckNext            bool     `json:"ack_next"`
	AckAsync           bool     `json:"ack_async"`
	AckInflight        int      `json:"ack_inflight"`
	Rate               int      `json:"rate"`
	PushBatch          int      `json:"push_batch"`
	Pacers             int      `json:"pacers"`
	MaxInflight        int      `json:"max_inflight"`
	Payload            int      `json:"payload"`
	Headers            int      `json:"headers"`
	Pipeline           bool     `json:"pipeline"`
	Encoding           Encoding `json:"encoding"`
	PopBatch           int      `json:"pop_batch"`
	PopPartitions      int      `json:"pop_partitions"`
	Conns              int      `json:"conns"`
	Client             Client   `json:"client"`
	PopWait            float64  `json:"pop_wait_s"`
	Lease              float64  `json:"lease_s"`
	Duration           float64  `json:"duration_s"`
	CompletedRetention float64  `json:"completed_retention_s"`
	// DedupWindow is 0 when deduplication was off and no ids were sent.
	DedupWindow float64 `json:"dedup_window_s"`
	Verify      bool    `json:"verify"`
}

func settingsOf(c *Config) Settings {
	return Settings{
		Mode: c.Mode, Queue: c.Queue, Partitions: c.Partitions, Consumers: c.Consumers,
		ManualAck: c.ManualAck, AckNext: c.AckNext, AckAsync: c.AckAsync, AckInflight: c.AckInflight,
		Rate: c.Rate, PushBatch: c.PushBatch, Pacers: c.Pacers, MaxInflight: c.MaxInflight,
		Payload: c.Payload, Headers: c.Headers, Pipeline: c.Pipeline, Encoding: c.Encoding, PopBatch: c.PopBatch, PopPartitions: c.PopPartitions,
		Conns: c.Conns, Client: c.Client, PopWait: c.PopWait.Seconds(), Lease: c.Lease.Seconds(), Duration: c.Duration.Seconds(), CompletedRetention: c.CompletedRetention.Seconds(),
		DedupWindow: c.DedupWindow.Seconds(), Verify: c.Verify,
	}
}

// Run runs the load test cfg describes against each of its targets in
// turn, writing the configuration, the interval lines and the final figures
// to out, and the files of cfg.OutDir. Cancelling ctx stops the producers
// early; the run still drains briefly, prints its final figures and writes
// its files. The error is ErrVerifyFailed (wrapped) when verification
// failed, with the summary complete.
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	if err := cfg.validate(); err != nil {
		return Summary{}, fmt.Errorf("loadtest: %w: %w", ErrInvalidConfig, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &printer{w: out}
	var sum Summary
	type plan struct {
		target Target
		sync   JetStreamSync
		label  string
	}
	var plans []plan
	for _, t := range cfg.Targets {
		if t == TargetJetStream {
			for _, s := range cfg.JetStreamSyncs {
				plans = append(plans, plan{t, s, "jetstream-" + string(s)})
			}
			continue
		}
		plans = append(plans, plan{t, "", string(t)})
	}
	for i, pl := range plans {
		if ctx.Err() != nil {
			break
		}
		if i > 0 {
			p.printf("\n")
		}
		dir := cfg.OutDir
		if dir != "" && len(plans) > 1 {
			dir = filepath.Join(dir, pl.label)
		}
		res, err := runOne(ctx, &cfg, pl.target, pl.sync, pl.label, dir, p)
		if err != nil {
			return sum, fmt.Errorf("loadtest: %s: %w", pl.label, err)
		}
		sum.Runs = append(sum.Runs, res)
	}
	if len(sum.Runs) > 1 {
		p.printf("\n")
		writeComparison(p, sum.Runs)
		if cfg.OutDir != "" {
			if err := writeJSON(filepath.Join(cfg.OutDir, "summary.json"), sum); err != nil {
				return sum, fmt.Errorf("loadtest: %w", err)
			}
		}
	}
	if !sum.OK() {
		return sum, fmt.Errorf("loadtest: %w", ErrVerifyFailed)
	}
	return sum, nil
}

// runner is one target's run.
type runner struct {
	cfg    *Config
	label  string
	target Target
	log    *slog.Logger
	out    *printer

	c      counters
	lat    *latencies
	v      *verifier
	be     backend
	ackSem chan struct{}
	acks   sync.WaitGroup
	pushes sync.WaitGroup
	bufs   sync.Pool // *[][]byte of PushBatch payload buffers
	plog   *pushLog  // Config.PushLog; nil without it

	lastErr [3]atomic.Pointer[string] // push, pop, ack
}

const (
	errPush = iota
	errPop
	errAck
)

func (r *runner) noteErr(kind int, err error) {
	s := err.Error()
	r.lastErr[kind].Store(&s)
	r.log.Debug("loadtest: request failed", "kind", kind, "err", err)
}

func runOne(ctx context.Context, cfg *Config, target Target, jsSync JetStreamSync, label, dir string, p *printer) (Result, error) {
	r := &runner{
		cfg:    cfg,
		label:  label,
		target: target,
		log:    cfg.Logger.With("run", label),
		out:    p,
		lat:    newLatencies(),
		v:      newVerifier(rand.Uint32(), cfg.Pacers, cfg.Partitions, cfg.Verify, !cfg.ManualAck),
		ackSem: make(chan struct{}, max(cfg.AckInflight, 1)),
	}
	r.bufs.New = func() any {
		b := make([][]byte, cfg.PushBatch)
		return &b
	}
	if cfg.PushLog && dir != "" {
		r.plog = newPushLog()
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Result{}, fmt.Errorf("out dir: %w", err)
		}
	}

	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	var err error
	switch target {
	case TargetComb:
		r.be, err = newCombBackend(setupCtx, cfg, r.log)
	case TargetJetStream:
		r.be, err = newJetStreamBackend(setupCtx, cfg, jsSync, r.log)
	}
	cancel()
	if err != nil {
		return Result{}, err
	}
	defer r.be.close()

	r.printConfig()
	smp := newSampler(ctx, cfg, target, r.be.brokerPID(), r.log)
	defer smp.close()

	res := Result{Label: label, Target: target, Sync: jsSync, Settings: settingsOf(cfg)}
	consCtx, stopConsumers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConsumers()
	var consumers sync.WaitGroup
	for i := range cfg.Consumers {
		consumers.Go(func() { r.be.consume(consCtx, i, r) })
	}

	start := time.Now()
	res.Start = start
	var pacers sync.WaitGroup
	var sem chan struct{}
	if cfg.Mode == ModeOpenLoop {
		sem = make(chan struct{}, cfg.MaxInflight)
	}
	// The pacers end the schedule themselves at start+Duration; ctx only
	// interrupts them.
	for i := range cfg.Pacers {
		pacers.Go(func() { r.pace(ctx, i, start, sem) })
	}

	tk := newTicker(r, smp, start, dir)
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		tk.loop()
	}()

	pacers.Wait()
	// The producing window ends with the last request sent; answers still
	// coming belong to the drain.
	produced := time.Since(start)
	popsAtEnd := r.c.popped.Load()
	res.Elapsed = produced.Seconds()
	res.Interrupted = ctx.Err() != nil && produced < cfg.Duration-time.Second/2
	r.pushes.Wait()

	r.drain(ctx, cfg.Drain)
	res.Drained = time.Since(start.Add(produced)).Seconds()
	stopConsumers()
	consumers.Wait()
	r.waitAcks(10 * time.Second)
	tk.stop()
	<-tickDone

	res.Counts = r.c.snapshot()
	res.PushRate = float64(res.Counts.Pushed) / res.Elapsed
	res.PopRate = float64(popsAtEnd) / res.Elapsed
	res.Latency = percentiles(tk.total)
	res.AckRTTMs = ms(res.Counts.ackRTT())
	res.PushRTT = ms(res.Counts.pushRTT())
	res.Verdict = r.v.verdict()
	res.Resources = tk.resources()
	r.printFinal(&res)

	if dir != "" {
		if err := tk.writeFiles(&res); err != nil {
			return res, err
		}
	}
	if r.plog != nil {
		if err := r.plog.write(filepath.Join(dir, "pushes.csv"), start); err != nil {
			return res, err
		}
		if n := r.plog.droppedPushes(); n > 0 {
			r.log.Warn("pushes.csv holds the first pushes only", "logged", maxLoggedPushes, "not_logged", n)
		}
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Go's timers wake an idle process through epoll_wait, whose timeout is
// in whole milliseconds (golang/go#53824): a pacer woken by its timer
// sends up to a millisecond late, 0.7 ms at the median at ten pushes a
// second, and that lateness counts in every e2e latency, which runs from
// the scheduled time (docs/benchmarks.md, "Push by push"). When the
// schedule's pushes are at least spinFrom apart, a pacer sleeps until
// spinLast before its push and yields in a loop for the rest: at most
// spinLast of CPU a push, so at most 5 % of a core.
const (
	spinFrom = 20 * time.Millisecond
	spinLast = time.Millisecond
)

// pace is pacer i: in open loop it sends push requests i, i+Pacers, …
// of the schedule at their times; in closed loop it sends them back to
// back. Request k goes to partition k mod Partitions.
func (r *runner) pace(ctx context.Context, i int, start time.Time, sem chan struct{}) {
	cfg := r.cfg
	batch := int64(cfg.PushBatch)
	end := start.Add(cfg.Duration)
	if cfg.Mode == ModeClosed {
		for k := i; ctx.Err() == nil && time.Now().Before(end); k += cfg.Pacers {
			r.c.offered.Add(batch)
			r.pushes.Add(1)
			r.send(i, k%cfg.Partitions, time.Now())
		}
		return
	}
	per := cfg.pushInterval()
	spin := time.Duration(per) >= spinFrom
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for k := i; ; k += cfg.Pacers {
		due := start.Add(time.Duration(float64(k) * per))
		if !due.Before(end) {
			return
		}
		if d := time.Until(due); d > 0 {
			if spin {
				d -= spinLast
			}
			if d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
			for spin && time.Now().Before(due) {
				if ctx.Err() != nil {
					return
				}
				runtime.Gosched()
			}
		} else if ctx.Err() != nil {
			return
		}
		r.c.offered.Add(batch)
		select {
		case sem <- struct{}{}:
		default:
			// Over the in-flight cap: shed, counted, never sent.
			r.c.shed.Add(batch)
			continue
		}
		r.pushes.Add(1)
		go func() {
			defer func() { <-sem }()
			r.send(i, k%cfg.Partitions, due)
		}()
	}
}

// send pushes one request of PushBatch messages scheduled at due; the
// caller has added it to r.pushes.
func (r *runner) send(producer, part int, due time.Time) {
	defer r.pushes.Done()
	cfg := r.cfg
	first, floor := r.v.begin(producer, part, cfg.PushBatch)
	bp := r.bufs.Get().(*[][]byte)
	defer r.bufs.Put(bp)
	payloads := *bp
	h := header{Run: r.v.run, Producer: uint32(producer), Partition: uint32(part), Sched: due.UnixNano(), Floor: floor}
	for j := range payloads {
		h.Index = uint16(j)
		h.Seq = first + uint64(j)
		payloads[j] = encodePayload(payloads[j], cfg.Encoding, cfg.Payload, &h)
	}
	var ids msgIDs
	if cfg.DedupWindow > 0 {
		ids = msgIDs{set: true, run: r.v.run, producer: uint32(producer), partition: uint32(part), first: first}
	}
	r.c.pushInflight.Add(1)
	t0 := time.Now()
	// In-flight pushes finish even when the run is interrupted: a push
	// cancelled halfway would be a failure the broker did not cause.
	dups, err := r.be.push(context.Background(), part, payloads, ids)
	t1 := time.Now()
	r.c.pushRTT.Add(int64(t1.Sub(t0)))
	if r.plog != nil {
		r.plog.pushed(pushKey{uint32(producer), uint32(part), first}, due, t0, t1, len(payloads), err != nil)
	}
	r.c.pushInflight.Add(-1)
	r.c.pushReqs.Add(1)
	n := int64(len(payloads))
	if err != nil {
		r.c.pushFailReqs.Add(1)
		r.c.pushFailMsgs.Add(n)
		r.noteErr(errPush, err)
		r.v.finish(producer, part, first, len(payloads), false)
		return
	}
	// A message answered duplicate was not stored again, so it is not
	// counted pushed; but its id is its own, so its original is this very
	// message stored earlier (a retry inside the broker, say), and the
	// verifier expects it delivered: a duplicate answer for a message
	// never stored shows up as missing.
	r.c.pushed.Add(n - int64(dups))
	r.c.pushDups.Add(int64(dups))
	r.v.finish(producer, part, first, len(payloads), true)
}

// deliver accounts one batch of delivered messages, received at now, and
// returns their refs for settle.
func (r *runner) deliver(now time.Time, datas [][]byte) []ref {
	refs := make([]ref, len(datas))
	lat := make([]int64, 0, len(datas))
	nowNS := now.UnixNano()
	var h header
	for i, d := range datas {
		if err := decodePayload(d, &h); err != nil {
			r.v.foreign.Add(1)
			continue
		}
		if h.Run == r.v.run {
			lat = append(lat, (nowNS-h.Sched)/int64(time.Microsecond))
			if r.plog != nil {
				r.plog.delivered(pushKey{h.Producer, h.Partition, h.Seq - uint64(h.Index)}, nowNS)
			}
		}
		refs[i] = r.v.observe(&h)
	}
	r.c.popped.Add(int64(len(datas)))
	r.lat.record(lat)
	return refs
}

// ackOutcome is what one ack request achieved.
type ackOutcome struct {
	acked  int64 // messages settled
	done   []ref // those of them this run tracks
	failed bool  // the request failed or an ack in it was refused
	rtt    time.Duration
	timed  bool // rtt is a round trip worth averaging
	err    error
}

// settle runs ack, from its own goroutine when AckAsync (at most
// AckInflight at a time; it waits for a slot, an ack is never shed), and
// accounts its outcome.
func (r *runner) settle(ack func(ctx context.Context) ackOutcome) {
	run := func() {
		// Acks outlive the consumers' context: a batch received is acked.
		o := ack(context.Background())
		r.c.ackReqs.Add(1)
		r.c.acked.Add(o.acked)
		if o.timed {
			r.c.ackRTT.Add(int64(o.rtt))
			r.c.ackTimed.Add(1)
		}
		if o.failed {
			r.c.ackFailReqs.Add(1)
			if o.err != nil {
				r.noteErr(errAck, o.err)
			}
		}
		r.v.complete(o.done)
	}
	if !r.cfg.AckAsync {
		run()
		return
	}
	r.ackSem <- struct{}{}
	r.c.ackInflight.Add(1)
	r.acks.Go(func() {
		defer func() {
			r.c.ackInflight.Add(-1)
			<-r.ackSem
		}()
		run()
	})
}

// drain waits, at most d (at most interruptedDrain once ctx is
// cancelled), until the consumers have taken everything the producers
// stored: with verification, until no stored message is left undelivered;
// without, until pops (redeliveries and foreign messages included) reach
// pushes; and until no ack is in flight.
func (r *runner) drain(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	capped := false
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ctx.Err() != nil && !capped {
			capped = true
			if dl := time.Now().Add(interruptedDrain); dl.Before(deadline) {
				deadline = dl
			}
		}
		if !time.Now().Before(deadline) {
			return
		}
		done := r.c.ackInflight.Load() == 0
		if r.cfg.Verify {
			done = done && r.v.unseenStored.Load() == 0
		} else {
			done = done && r.c.popped.Load() >= r.c.pushed.Load()
		}
		if done {
			return
		}
		<-tick.C
	}
}

// waitAcks waits, at most d, for the asynchronous acks still running.
func (r *runner) waitAcks(d time.Duration) {
	done := make(chan struct{})
	go func() {
		r.acks.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.log.Warn("loadtest: acks still in flight at the end", "n", r.c.ackInflight.Load())
	}
}
