package bridge

import (
	"time"

	"github.com/combmq/comb/domain"
)

// Hand-offs: a push answers waiting pops itself.
//
// A pop that long-polls here is, at light load, what nearly every message
// is waiting for. Before a push transaction, its worker takes such waiters
// out of their queues, one per group and partition the push stores in, and
// offers them the push's messages (Store.PushOffer): the transaction leases
// the messages to those whose group has nothing else to deliver there, and
// the worker answers them with the messages after the commit, before the
// pushes' own replies. A waiter the push did not serve tries again at once,
// as the push's wake-up would have made it; a partition whose every group
// was served wakes nobody. That saves each message a pop's statement, its
// commit and its wake-up's hop (docs/benchmarks.md).

// offerMargin keeps waiters whose deadline is this near out of offers:
// their answer could come after the requester stopped waiting.
const offerMargin = 100 * time.Millisecond

// maxOffers bounds the offers of one push transaction.
const maxOffers = 64

// claimOffers takes, for the pushes of batch, waiting pops to offer what
// they store: per queue, each waiter, and then each long poll in its
// group's line at the pop gate (popgate.go), that names a partition the
// pushes store in, or names none, takes one partition not yet offered to
// its group. The pops taken are attached to their queues until
// settleOffers.
func (p *popper) claimOffers(batch []*pushJob) ([]domain.Offer, []*popJob) {
	if p.b.maintenance.Load() {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if (p.nwait == 0 && p.gate.inLine.Load() == 0) || p.stopping {
		return nil, nil
	}
	var offers []domain.Offer
	var jobs []*popJob
	type target struct{ group, partition string }
	done := map[domain.QueueRef]bool{} // queues whose waiters were offered
	for i, j := range batch {
		queue := j.req.Queue
		wq := p.queues[queue]
		if done[queue] || ((wq == nil || len(wq.waiters) == 0) && p.gate.inLine.Load() == 0) {
			continue
		}
		done[queue] = true
		// The partitions the queue's pushes in this batch store in, in
		// order; delayed messages wait, so their partitions are left out.
		var parts []string
		stores := map[string]bool{} // the partitions in parts
		held := map[string]bool{}
		for _, k := range batch[i:] {
			if k.req.Queue != queue {
				continue
			}
			for _, m := range k.req.Messages {
				if m.Delayed() {
					held[m.Partition] = true
				}
				if !stores[m.Partition] {
					stores[m.Partition] = true
					parts = append(parts, m.Partition)
				}
			}
		}
		taken := map[target]bool{}
		next := map[string]int{} // per group: the next partition to offer
		now := time.Now()
		// offer makes job an offer if it may have one.
		offer := func(job *popJob) bool {
			if job.ns || job.deadline.Sub(now) < offerMargin {
				return false
			}
			g, part := job.req.Group, job.req.Partition
			if part == "" {
				for next[g] < len(parts) && (held[parts[next[g]]] || taken[target{g, parts[next[g]]}]) {
					next[g]++
				}
				if next[g] == len(parts) {
					return false
				}
				part = parts[next[g]]
			} else if held[part] || taken[target{g, part}] || !stores[part] {
				return false
			}
			if p.gone(job) {
				return false // its own next try drops it
			}
			taken[target{g, part}] = true
			offers = append(offers, domain.Offer{Pop: job.req, Partition: part})
			jobs = append(jobs, job)
			return true
		}
		if wq != nil {
			for job := range wq.waiters {
				if len(offers) == maxOffers {
					break
				}
				if offer(job) {
					p.takeLocked(wq, job)
				}
			}
		}
		p.gate.takeLined(queue, func(job *popJob) (took, more bool) {
			if len(offers) == maxOffers {
				return false, false
			}
			if !offer(job) {
				return false, true
			}
			p.attachLocked(queue) // a pop in line is not attached
			return true, true
		})
	}
	return offers, jobs
}

// settleOffers ends the offers of a push transaction that has returned:
// it answers the pops given messages (handed, one per job; nil when the
// transaction failed), and queues the others for a try of their own.
func (p *popper) settleOffers(jobs []*popJob, handed []domain.Handed) {
	for i, job := range jobs {
		if i < len(handed) && len(handed[i].Messages) > 0 {
			p.handoffs.Add(1)
			p.detach(job.req.Queue)
			job.call.t.quota.longPollDone()
			p.reply(job, handed[i].Messages)
			p.count.Add(-1)
			p.b.finish(job.call)
			continue
		}
		p.mu.Lock()
		p.detachLocked(job.req.Queue)
		p.mu.Unlock()
		p.ch <- job // never blocks: see popper
	}
}
