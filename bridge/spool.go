package bridge

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/spool"
	"github.com/combmq/comb/store"
)

// When the bridge spools a push (Config.Spool set):
//   - in maintenance mode, every push;
//   - while PostgreSQL is known to be down (a push failed with
//     domain.ErrUnavailable, and no ping has succeeded since), every push,
//     without trying the store first;
//   - a push that touches a partition with spooled messages not yet
//     drained, so that it lands after them: a producer's order holds;
//   - a push whose store call failed with domain.ErrUnavailable.
//
// Order holds per bridge only: another bridge that reaches PostgreSQL may
// store pushes to a partition directly while this one still holds spooled
// messages for it, so across bridges order is not kept during an outage.

// errMaintenance answers what the bridge does not serve in maintenance.
var errMaintenance = protocol.Errorf(protocol.CodeUnavailable, "maintenance, retry later")

// errSpoolFull answers a push the spool has no room for.
var errSpoolFull = protocol.Errorf(protocol.CodeUnavailable, "postgresql unavailable and the spool is full, retry later")

// spoolFirst splits batch into the jobs that go to the spool without
// trying the store, and the rest.
func (b *Bridge) spoolFirst(batch []*pushJob) (spooled, direct []*pushJob) {
	sp := b.cfg.Spool
	if sp == nil {
		return nil, batch
	}
	if b.maintenance.Load() || b.pgDown.Load() {
		return batch, nil
	}
	for _, j := range batch {
		if sp.Pending(&j.req) {
			spooled = append(spooled, j)
		} else {
			direct = append(direct, j)
		}
	}
	return spooled, direct
}

// spoolJobs appends jobs to the spool, one fsync for all, and answers
// each: "spooled", or 503 for those it had no room for.
func (b *Bridge) spoolJobs(jobs []*pushJob) {
	reqs := make([]domain.PushParams, len(jobs))
	for i, j := range jobs {
		reqs[i] = j.req
	}
	n, err := b.cfg.Spool.Append(reqs)
	if err != nil && !errors.Is(err, spool.ErrFull) {
		b.log.Error("spool append", "err", err)
	}
	b.spooledMsgs.Add(int64(countMessages(reqs[:n])))
	for i, j := range jobs {
		if i < n {
			res := make([]domain.PushResult, len(j.req.Messages))
			for k, m := range j.req.Messages {
				res[k] = domain.PushResult{Partition: m.Partition, Status: domain.Spooled}
			}
			b.respond(j.call, wire.PushReply(res))
		} else {
			b.respondError(j.call, errSpoolFull)
		}
		b.pushBytes.Add(-int64(j.size))
		j.call.t.quota.pushDone(j.quota)
		b.finish(j.call)
	}
}

func countMessages(reqs []domain.PushParams) int {
	n := 0
	for i := range reqs {
		n += len(reqs[i].Messages)
	}
	return n
}

// SetMaintenance turns maintenance mode on or off. On: every push is
// spooled, every other verb answers 503 "maintenance", and the bridge
// reads nothing from PostgreSQL. Off: the drain starts at once.
func (b *Bridge) SetMaintenance(on bool) {
	if b.maintenance.Swap(on) != on {
		b.log.Info("maintenance mode", "on", on)
		select {
		case b.drainKick <- struct{}{}:
		default:
		}
	}
}

// Maintenance reports whether the bridge is in maintenance mode.
func (b *Bridge) Maintenance() bool { return b.maintenance.Load() }

// SpoolStats returns the spool's figures, and false when the bridge has
// no spool.
func (b *Bridge) SpoolStats() (spool.Stats, bool) {
	if b.cfg.Spool == nil {
		return spool.Stats{}, false
	}
	return b.cfg.Spool.Stats(), true
}

// SpoolState is the spool's figures in their wire form, nil without one.
func (b *Bridge) SpoolState() *protocol.SpoolState {
	st, ok := b.SpoolStats()
	if !ok {
		return nil
	}
	s := &protocol.SpoolState{Bytes: st.Bytes, MaxBytes: st.MaxBytes, Records: st.Records, Messages: st.Messages,
		Drained: st.Drained, DrainRate: st.DrainRate}
	if !st.Oldest.IsZero() {
		s.OldestAgeS = time.Since(st.Oldest).Seconds()
	}
	return s
}

// handleMaintenance serves the operator verb: {"on":true|false} sets the
// mode, an empty body asks; the reply is the state either way.
func (b *Bridge) handleMaintenance(req micro.Request) {
	var in protocol.MaintenanceRequest
	if body := req.Data(); len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			const msg = `maintenance: the body must be {"on":true}, {"on":false} or empty`
			_ = req.Error("400", msg, wire.ErrorBody(protocol.CodeBadRequest, msg, 0))
			return
		}
	}
	if in.On != nil {
		b.SetMaintenance(*in.On)
	}
	out, _ := json.Marshal(protocol.MaintenanceReply{Maintenance: b.maintenance.Load(), Spool: b.SpoolState()})
	if err := req.Respond(out); err != nil {
		b.log.Warn("maintenance reply failed", "err", err)
	}
}

// drainer replays the spool into the store, in order, whenever the
// bridge is not in maintenance mode and PostgreSQL answers a ping.
func (b *Bridge) drainer() {
	defer b.wg.Done()
	sp := b.cfg.Spool
	// The drain waits for PostgreSQL as long as the bridge runs: no
	// MaxElapsedTime. Each ping has its own timeout.
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = time.Second
	bo.MaxElapsedTime = 0
	marks := map[string]int64{} // file id -> mark known to be in the store
	forget := true              // marks of files deleted before a crash may be left
	// wait waits d, or less when an append (with appended) or a change
	// of mode says there is work.
	wait := func(d time.Duration, appended bool) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		var app <-chan struct{}
		if appended {
			app = sp.Appended()
		}
		select {
		case <-t.C:
		case <-app:
		case <-b.drainKick:
		case <-b.quit:
			return false
		}
		return true
	}
	for {
		if b.maintenance.Load() || (sp.Empty() && !b.pgDown.Load() && !forget) {
			if !wait(time.Second, true) {
				return
			}
			continue
		}
		ctx, cancel := b.storeCtx()
		err := b.st.Ping(ctx)
		cancel()
		if err != nil {
			b.pgDown.Store(true)
			if !wait(bo.NextBackOff(), false) {
				return
			}
			continue
		}
		if b.pgDown.Swap(false) {
			b.log.Info("postgresql reachable again", "spooled_records", sp.Stats().Records)
		}
		if forget {
			ctx, cancel := b.storeCtx()
			err := b.st.ForgetSpoolFiles(ctx, sp.ID(), sp.Files())
			cancel()
			if err == nil {
				forget = false
			}
		}
		if err := b.drainOnce(marks); err != nil {
			if errors.Is(err, domain.ErrUnavailable) {
				b.pgDown.Store(true)
			} else {
				b.log.Warn("spool drain", "err", err)
			}
			if !wait(bo.NextBackOff(), false) {
				return
			}
			continue
		}
		bo.Reset()
	}
}

// drainOnce stores the spool's next batch, if any, and commits it.
func (b *Bridge) drainOnce(marks map[string]int64) error {
	sp := b.cfg.Spool
	batch, err := sp.Next(b.cfg.DrainBatchMessages, int64(b.cfg.BatchBytes))
	if err != nil || batch == nil {
		return err
	}
	ctx, cancel := b.storeCtx()
	defer cancel()
	mark, ok := marks[batch.File]
	if !ok {
		if mark, err = b.st.SpoolMark(ctx, batch.File); err != nil {
			return err
		}
		marks[batch.File] = mark
	}
	// Records up to the mark were stored before a crash: skip them.
	sb := store.SpoolBatch{Spool: sp.ID(), File: batch.File, Prev: max(mark, batch.Prev), Last: batch.Last}
	for i := range batch.Records {
		if batch.Records[i].Seq > sb.Prev {
			sb.Pushes = append(sb.Pushes, batch.Records[i].Push)
		}
	}
	var outs []domain.PushOutcome
	if len(sb.Pushes) > 0 {
		outs, err = b.st.PushSpooled(ctx, sb)
		if errors.Is(err, store.ErrSpoolMarkMoved) {
			delete(marks, batch.File) // read it again
			return err
		}
		if err != nil {
			return err
		}
	}
	marks[batch.File] = max(mark, batch.Last)
	files := len(sp.Files())
	if err := sp.Commit(batch); err != nil {
		return err
	}
	if len(sp.Files()) < files {
		// The file is gone, durably: its mark may go too.
		delete(marks, batch.File)
		if err := b.st.ForgetSpoolFiles(ctx, sp.ID(), sp.Files()); err != nil {
			b.log.Warn("forget drained spool files", "err", err)
		}
	}
	var wake wakeSet
	for i, out := range outs {
		if out.Err != nil {
			// Accepted, and refused now for what it is: say so loudly,
			// the producer was told "spooled".
			b.log.Error("spool drain: a spooled push was refused by the store and dropped",
				"queue", sb.Pushes[i].Queue.String(), "messages", len(sb.Pushes[i].Messages), "err", out.Err)
			b.drainDropped.Add(int64(len(sb.Pushes[i].Messages)))
			continue
		}
		n := 0
		for _, r := range out.Results {
			if r.Status == domain.Stored {
				wake.add(sb.Pushes[i].Queue, "", r.Partition)
				n++
			}
		}
		wake.addCount(sb.Pushes[i].Queue, n)
	}
	b.publishWakes(&wake)
	return nil
}
