package store

import (
	"cmp"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// Hand-off: a push that leases what it stores to a waiting pop.
//
// At light load nearly every message finds a pop of its group long-polling
// in the bridge. Without a hand-off the push commits, wakes that pop, and
// the pop runs a statement of its own that finds the cursor by key, leases
// the message and reads the segment back: a round trip, a commit and the
// most expensive statement of the three (docs/benchmarks.md). A hand-off
// is one more statement in the push's round trip, leasing the new
// messages to the pop on the cursor's row, and the bridge answers the pop
// with the messages it already holds.
//
// The statement leases only what a pop would have leased first: the
// cursor must be caught up to the push's first new offset (everything
// before it committed, or retired) and hold no live lease, so the group's
// order and its one lease per partition hold as for every pop. The push
// holds its partitions' row locks, so no other push can add messages
// before these meanwhile; an ack of the cursor's last lease that commits
// while the statement waits for the cursor's row counts, as it would for a
// pop that came after it. Messages that a delay holds back are never
// handed off, nor pushes with producer ids (their transaction is
// writeDedup's).

// handoffSQL leases to each offer ($1 partition ids, $2 groups) the first
// $4 of the $3 messages the push stored there, when its cursor is caught
// up and unleased; $5 and $6 are the lease's duration and auto-ack, $7 the
// lease ids (leaseID). It runs after allocOffsetsSQL, so the push's first
// new offset is the partition's new next_offset less $3. It returns, per
// offer taken, the partition, the group, the transaction's time (the
// segment's created_at) and how many groups the partition's queue has
// (not its cursors: a group may have none there yet, makeMissingCursors).
// An offer to a group without a cursor there is not taken: its pop makes
// the cursor.
const handoffSQL = `
UPDATE comb_cursors c SET
    lease_id       = CASE WHEN x.auto THEN NULL ELSE x.lease END,
    lease_from     = p.next_offset - x.n,
    lease_upto     = p.next_offset - x.n + x.k - 1,
    lease_until    = CASE WHEN x.auto THEN NULL ELSE now() + x.ms * interval '1 millisecond' END,
    leased_at      = clock_timestamp(),
    attempts       = CASE WHEN x.auto THEN 0 ELSE 1 END,
    delivered_upto = p.next_offset - x.n + x.k - 1,
    committed      = CASE WHEN x.auto THEN p.next_offset - x.n + x.k ELSE c.committed END
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bool[], $7::text[])
     AS x(pid, grp, n, k, ms, auto, lease)
JOIN comb_partitions p ON p.id = x.pid
WHERE c.partition_id = x.pid AND c.group_name = x.grp
  AND greatest(c.committed, p.low_offset) = p.next_offset - x.n
  AND c.delivered_upto < p.next_offset - x.n
  AND (c.lease_id IS NULL OR c.lease_until < now())
RETURNING c.partition_id, c.group_name, now(),
          (SELECT count(*) FROM comb_groups g WHERE g.queue_id = p.queue_id)`

// offerPlan is one offer a push makes: the messages it would hand over
// (their offsets filled in once the segment's base is known).
type offerPlan struct {
	at      int // index in the caller's offers
	group   string
	stored  *storedIn
	msgs    []domain.Message
	leaseMS int64
	auto    bool
	lease   string // empty with auto-ack

	taken   bool
	created time.Time
	groups  int64
}

// storedIn is what a push stores in one partition: the messages in offset
// order, each with its index in the segment. They are the push's own,
// made into a pop's messages (delivered) only for the offers that take
// them.
type storedIn struct {
	seg     *segmentBuf
	config  domain.QueueConfig
	idx     []int64
	msgs    []*domain.PushMessage
	delayed bool // some message is held back (hold): none is handed off
}

// delivered is m as a pop returns it, before its lease, offset and time.
func delivered(m *domain.PushMessage) domain.Message {
	return domain.Message{Partition: m.Partition, ID: m.ID, Attempt: 1, Data: m.Data, Encoding: m.Encoding, Headers: m.Headers}
}

// longestTime is the creation time whose RFC 3339 form is the longest a
// message can have (nine fractional digits, no zeros to trim), which a
// handed message is sized with: its own is known only once stored.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// planOffers chooses what each offer would take: the first messages the
// push stores in its partition, up to the pop's max and the bytes of its
// reply. It leaves out offers of a queue with a delay_ms, of a partition
// where the push holds a message back or stored nothing, and a second
// offer to one group and partition. It runs after buildSegments.
func (p *pushPlan) planOffers(offers []domain.Offer) error {
	p.offers = p.offers[:0]
	if len(offers) == 0 {
		return nil
	}
	type part struct {
		queue domain.QueueRef
		name  string
	}
	stored := map[part]*storedIn{}
	for _, o := range offers {
		stored[part{o.Pop.Queue, o.Partition}] = nil
	}
	// One pass over the push's messages, for the partitions offered.
	for i, r := range p.reqs {
		if p.outs[i].Err != nil {
			continue
		}
		for j := range r.Messages {
			m, pl := &r.Messages[j], &p.places[i][j]
			k := part{r.Queue, m.Partition}
			st, offered := stored[k]
			if !offered || pl.dup || pl.seg == nil {
				continue
			}
			if st == nil {
				st = &storedIn{seg: pl.seg, config: p.queues[i].Config}
				stored[k] = st
			}
			st.delayed = st.delayed || m.Delayed()
			st.idx = append(st.idx, pl.idx)
			st.msgs = append(st.msgs, m)
		}
	}
	type key struct {
		pid   int64
		group string
	}
	seen := map[key]bool{}
	// One message to size at a time: size is a function value, so what
	// it is given escapes, and a variable of the loop would be one
	// allocation a message.
	sized := new(domain.Message)
	for at, o := range offers {
		st := stored[part{o.Pop.Queue, o.Partition}]
		group := cmp.Or(o.Pop.Group, protocol.DefaultGroup)
		if st == nil || st.delayed || st.config.DelayMS > 0 || seen[key{st.seg.id, group}] {
			continue
		}
		op := offerPlan{at: at, group: group, stored: st, auto: o.Pop.AutoAck,
			leaseMS: cmp.Or(max(o.Pop.LeaseMS, 0), st.config.LeaseMS)}
		if !op.auto {
			token, err := leaseToken()
			if err != nil {
				return err
			}
			op.lease = leaseID(st.seg.id, token)
		}
		size := o.Pop.SizeOf
		if size == nil {
			size = defaultSize
		}
		maxN := cmp.Or(max(o.Pop.Max, 0), protocol.DefaultPopMax)
		total, keep := 0, 0
		for keep < len(st.msgs) && keep < maxN {
			*sized = delivered(st.msgs[keep])
			sized.Lease, sized.Offset, sized.CreatedAt = op.lease, math.MaxInt64, longestTime // sized at their longest
			total += size(sized)
			if o.Pop.MaxBytes > 0 && total > o.Pop.MaxBytes && (keep > 0 || o.Pop.StrictMaxBytes) {
				break
			}
			keep++
		}
		if keep == 0 {
			continue
		}
		op.msgs = make([]domain.Message, keep) // each offer leases its own copies
		for k, m := range st.msgs[:keep] {
			op.msgs[k] = delivered(m)
		}
		seen[key{st.seg.id, group}] = true
		p.offers = append(p.offers, op)
	}
	return nil
}

// queueOffers queues handoffSQL for the planned offers and returns the
// function that reads its rows.
func (p *pushPlan) queueOffers(b *pgx.Batch) func(br pgx.BatchResults) error {
	if len(p.offers) == 0 {
		return func(pgx.BatchResults) error { return nil }
	}
	n := len(p.offers)
	pids, ns, ks, ms := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	groups, leases, autos := make([]string, n), make([]string, n), make([]bool, n)
	for i, o := range p.offers {
		pids[i], groups[i], ns[i], ks[i] = o.stored.seg.id, o.group, o.stored.seg.n, int64(len(o.msgs))
		ms[i], autos[i], leases[i] = o.leaseMS, o.auto, o.lease
	}
	b.Queue(handoffSQL, pids, groups, ns, ks, ms, autos, leases)
	return func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var (
			pid, ngroups int64
			group        string
			created      time.Time
		)
		_, err = pgx.ForEachRow(rows, []any{&pid, &group, &created, &ngroups}, func() error {
			for i := range p.offers {
				if o := &p.offers[i]; o.stored.seg.id == pid && o.group == group {
					o.taken, o.created, o.groups = true, created, ngroups
				}
			}
			return nil
		})
		return err
	}
}

// handed returns, per offer of the caller's n, what the push leased to
// it; it runs once the transaction has committed. Every group of a
// partition took every message the push stored there when the offers
// taken there are as many as its queue's groups and none took only some.
func (p *pushPlan) handed(n int) []domain.Handed {
	out := make([]domain.Handed, n)
	taken := map[int64]int64{}
	some := map[int64]bool{} // an offer took only some of the messages
	for _, o := range p.offers {
		if o.taken {
			pid := o.stored.seg.id
			taken[pid]++
			some[pid] = some[pid] || int64(len(o.msgs)) < o.stored.seg.n
		}
	}
	for _, o := range p.offers {
		seg := o.stored.seg
		if !o.taken || !seg.ok {
			continue
		}
		for k := range o.msgs {
			o.msgs[k].Offset = seg.base + o.stored.idx[k]
			o.msgs[k].Lease = o.lease
			o.msgs[k].CreatedAt = o.created
		}
		out[o.at] = domain.Handed{Messages: o.msgs, AllGroups: !some[seg.id] && taken[seg.id] == o.groups}
	}
	return out
}
