package store

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// segmentBuf collects one partition's messages of a push transaction.
type segmentBuf struct {
	id    int64
	n     int64
	bytes int64
	msgs  []*domain.PushMessage // in order: its payload frames them (segmentPayloads)
	count int                   // of msgs, counted before they are listed
	size  int                   // of its payload
	base  int64
	ok    bool
}

// msgPlace says where one pushed message went: into a segment at an index,
// or onto an earlier message as its duplicate.
type msgPlace struct {
	pid    int64
	seg    *segmentBuf
	idx    int64
	dupOf  int64 // with dup: the original's offset, or -1 while it is in this batch
	dupRef *msgPlace
	dup    bool
}

type pushPlan struct {
	reqs   []domain.PushParams
	outs   []domain.PushOutcome // per request: Err set by the checks, Results at the end
	queues []queueRow           // per request
	places [][]msgPlace         // per request, per message
	segs   map[int64]*segmentBuf
	pids   []int64          // every partition touched, sorted
	queue  map[int64]int64  // queue id by partition id
	hot    map[int64]bool   // partitions whose segments go into the ring (slots.go)
	dedup  bool             // some message is subject to deduplication
	holds  []hold           // the delayed messages, in the order framed
	offers []offerPlan      // waiting pops to lease to (handoff.go); writeSimple only
	fresh  []freshPartition // partitions the push creates (fresh.go); writeSimple only
}

// hold is a delayed message of a push: where it went and how long it holds
// its partition back (comb_holds).
type hold struct {
	place     *msgPlace
	delayMS   int64
	notBefore time.Time
}

// Push appends the requests' messages in one transaction and returns an
// outcome per request, in order: its results (one per message), or the
// error that refused that request alone (a limit, a too-large message). It
// returns an error, set in every outcome too, when the transaction itself
// failed. A queue that does not exist is created with
// domain.DefaultQueueConfig.
//
// The transaction writes one segment row per partition it touches, however
// many messages and requests it carries, and allocates offsets under the
// partition rows' locks, taken in id order and held to commit, so that
// offsets become visible in commit order and concurrent pushes cannot
// deadlock.
func (s *Store) Push(ctx context.Context, reqs []domain.PushParams) ([]domain.PushOutcome, error) {
	outs, _, err := s.PushOffer(ctx, reqs, nil)
	return outs, err
}

// PushOffer is Push, and leases what it stores to the waiting pops offered
// (handoff.go) in the same transaction: it returns, per offer, what it
// leased to it, durable once it returns without error. A push with
// producer ids to deduplicate hands nothing off.
func (s *Store) PushOffer(ctx context.Context, reqs []domain.PushParams, offers []domain.Offer) ([]domain.PushOutcome, []domain.Handed, error) {
	outs, handed, retry, err := s.push(ctx, reqs, offers, true)
	if err != nil || len(retry) == 0 {
		return outs, handed, err
	}
	// A queue was deleted under a cached partition id: forget it and push
	// those requests once more (the push recreates the queue). Or the
	// queue is still there and another bridge made a partition this push
	// took for new (fresh.go): the next try looks that one up, and the
	// rest of what the store knows of the queue stays.
	again := make([]domain.PushParams, len(retry))
	checked := map[domain.QueueRef]bool{}
	for i, r := range retry {
		if ref := reqs[r].Queue; !checked[ref] {
			checked[ref] = true
			if !s.queueUnchanged(ctx, ref) {
				s.forget(ref)
			}
		}
		again[i] = reqs[r]
	}
	outs2, _, retry2, err := s.push(ctx, again, nil, false)
	for i, r := range retry {
		outs[r] = outs2[i]
	}
	for _, i := range retry2 {
		outs[retry[i]] = domain.PushOutcome{Err: fmt.Errorf("push: queue %q changed during the push, retry: %w", reqs[retry[i]].Queue, domain.ErrConflict)}
	}
	return outs, handed, err
}

// push makes one attempt and returns, besides the outcomes, the indexes of
// the requests to try again. fresh lets it create new partitions in its
// own transaction (fresh.go).
func (s *Store) push(ctx context.Context, reqs []domain.PushParams, offers []domain.Offer, fresh bool) ([]domain.PushOutcome, []domain.Handed, []int, error) {
	none := make([]domain.Handed, len(offers))
	p, err := s.plan(ctx, reqs, false, fresh)
	if err != nil {
		return failAll(len(reqs), err), none, nil, err
	}
	if len(p.pids) == 0 {
		for i := range p.outs {
			if p.outs[i].Err == nil {
				p.outs[i].Results = []domain.PushResult{}
			}
		}
		return p.outs, none, nil, nil
	}
	if p.dedup {
		err = s.writeDedup(ctx, s.pool, p)
	} else {
		p.buildSegments()
		if err = p.planOffers(offers); err == nil {
			err = s.writeSimple(ctx, s.pool, p)
		}
	}
	if err != nil {
		err = fmt.Errorf("push: %w", classify(err))
		for i := range p.outs {
			if p.outs[i].Err == nil {
				p.outs[i].Err = err
			}
		}
		return p.outs, none, nil, err
	}
	s.settleFresh(p)
	retry := p.results()
	handed := p.handed(len(offers))
	if s.log.Enabled(ctx, slog.LevelDebug) {
		// As a pop logs its leases (logLeases): what a redelivery's
		// attempt number is judged against.
		for i, h := range handed {
			if n := len(h.Messages); n > 0 {
				s.log.DebugContext(ctx, "handoff leased", "group", offers[i].Pop.Group, "partition", h.Messages[0].Partition,
					"partition_id", leasePartition(h.Messages[0].Lease), "lease", h.Messages[0].Lease,
					"from", h.Messages[0].Offset, "to", h.Messages[n-1].Offset)
			}
		}
	}
	return p.outs, handed, retry, nil
}

// failAll returns n outcomes that all carry err.
func failAll(n int, err error) []domain.PushOutcome {
	outs := make([]domain.PushOutcome, n)
	for i := range outs {
		outs[i].Err = err
	}
	return outs
}

// plan resolves queues and partitions, applies per-request checks (message
// size, queue limits) and records where each message goes. accepted skips
// the queue's size checks: the messages were accepted already (spooled),
// and a limit must not lose them. fresh leaves new partitions for the
// push's own transaction to create (p.fresh, fresh.go) when no queue of
// the batch deduplicates (writeDedup creates none); without it plan
// creates them first.
func (s *Store) plan(ctx context.Context, reqs []domain.PushParams, accepted, fresh bool) (*pushPlan, error) {
	p := &pushPlan{reqs: reqs, outs: make([]domain.PushOutcome, len(reqs)), queues: make([]queueRow, len(reqs)), places: make([][]msgPlace, len(reqs)), segs: map[int64]*segmentBuf{}, queue: map[int64]int64{}, hot: map[int64]bool{}}
	for i, r := range reqs {
		q, err := s.queue(ctx, r.Queue, true)
		if err != nil {
			p.outs[i].Err = err
			continue
		}
		p.queues[i] = q
		if q.Config.DedupWindowS > 0 {
			fresh = false
		}
	}
	limited := map[int64]bool{}
	freshSeen := map[int64]bool{}
	for i, r := range reqs {
		out := &p.outs[i]
		if out.Err != nil {
			continue
		}
		q := p.queues[i]
		names := make([]string, 0, 1)
		// The partitions, each once: by the slice while they are few, by
		// a set past that (a push of 10,000 messages to 10,000 new
		// partitions spent half the broker's CPU comparing names).
		var seen map[string]bool
		for j := range r.Messages {
			m := &r.Messages[j]
			if !accepted && int64(m.Size()) > q.Config.MaxMessageBytes {
				which := fmt.Sprintf("message %d", j)
				if len(r.Messages) == 1 {
					which = "the message"
				}
				out.Err = fmt.Errorf("%w: %s is %d bytes, over the queue's max_message_bytes of %d",
					domain.ErrTooLarge, which, m.Size(), q.Config.MaxMessageBytes)
				break
			}
			switch {
			case seen != nil:
				if !seen[m.Partition] {
					seen[m.Partition] = true
					names = append(names, m.Partition)
				}
			case !slices.Contains(names, m.Partition):
				names = append(names, m.Partition)
				if len(names) > 16 {
					seen = make(map[string]bool, len(r.Messages))
					for _, n := range names {
						seen[n] = true
					}
				}
			}
		}
		if out.Err != nil {
			continue
		}
		if !accepted && (q.Config.MaxMessages > 0 || q.Config.MaxBytes > 0) {
			limited[q.ID] = true
		}
		ids, err := s.placeIDs(ctx, q, names, fresh, p, freshSeen)
		if err != nil {
			out.Err = err
			continue
		}
		p.places[i] = make([]msgPlace, len(r.Messages))
		for j, m := range r.Messages {
			p.places[i][j].pid = ids[m.Partition]
			if m.ID != "" && q.Config.DedupWindowS > 0 {
				p.dedup = true
			}
		}
	}
	if len(limited) > 0 {
		if err := s.checkLimits(ctx, p, limited); err != nil {
			return nil, err
		}
	}
	set := map[int64]bool{}
	for i := range reqs {
		if p.outs[i].Err != nil {
			continue
		}
		for _, pl := range p.places[i] {
			if !set[pl.pid] {
				set[pl.pid] = true
				p.pids = append(p.pids, pl.pid)
				p.queue[pl.pid] = p.queues[i].ID
				p.hot[pl.pid] = hotConfig(p.queues[i].Config)
			}
		}
	}
	slices.Sort(p.pids)
	return p, nil
}

// placeIDs returns the ids of q's partitions names, creating the new ones
// now, or with fresh, reserving their ids and adding them to p.fresh (once
// each: seen) for the push to create. A name is new when it is not in the
// cache and q's partitions are all there (knownPartitions), or else when
// PostgreSQL has no partition of that name (freshIDs).
func (s *Store) placeIDs(ctx context.Context, q queueRow, names []string, fresh bool, p *pushPlan, seen map[int64]bool) (map[string]int64, error) {
	if !fresh {
		return s.partitionIDs(ctx, q, names, true)
	}
	known, err := s.knownPartitions(ctx, q)
	if err != nil {
		return nil, err
	}
	ids, made, err := s.freshIDs(ctx, q, names, !known)
	if err != nil {
		return nil, err
	}
	for _, f := range made {
		if !seen[f.id] {
			seen[f.id] = true
			p.fresh = append(p.fresh, f)
		}
	}
	return ids, nil
}

// queueFiguresSQL reads the messages and bytes of queues $1 (checkLimits).
const queueFiguresSQL = `
	SELECT queue_id, sum(next_offset - low_offset)::bigint, sum(retained_bytes)::bigint
	FROM comb_partitions WHERE queue_id = ANY($1) GROUP BY queue_id`

// checkLimits refuses the requests that would take a queue past its
// max_messages or max_bytes. The check reads the figures at the start of the
// push, so pushes running at the same moment on other connections can
// overshoot a limit by their own size: the limits are a brake, not a wall.
func (s *Store) checkLimits(ctx context.Context, p *pushPlan, limited map[int64]bool) error {
	ids := make([]int64, 0, len(limited))
	for id := range limited {
		ids = append(ids, id)
	}
	rows, err := s.pool.Query(ctx, queueFiguresSQL, ids)
	if err != nil {
		return fmt.Errorf("push: read queue figures: %w", classify(err))
	}
	type fig struct{ n, b int64 }
	figs := map[int64]*fig{}
	var id, n, b int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n, &b}, func() error {
		figs[id] = &fig{n, b}
		return nil
	}); err != nil {
		return fmt.Errorf("push: read queue figures: %w", classify(err))
	}
	for i, r := range p.reqs {
		q := p.queues[i]
		if p.outs[i].Err != nil || !limited[q.ID] {
			continue
		}
		f := figs[q.ID]
		if f == nil {
			f = &fig{}
			figs[q.ID] = f
		}
		var bytes int64
		for _, m := range r.Messages {
			bytes += int64(m.Size())
		}
		n := int64(len(r.Messages))
		switch {
		case q.Config.MaxMessages > 0 && f.n+n > q.Config.MaxMessages:
			p.outs[i].Err = fmt.Errorf("%w: queue %q retains %d messages; max_messages is %d", domain.ErrLimit, q.Name, f.n, q.Config.MaxMessages)
		case q.Config.MaxBytes > 0 && f.b+bytes > q.Config.MaxBytes:
			p.outs[i].Err = fmt.Errorf("%w: queue %q retains %d bytes; max_bytes is %d", domain.ErrLimit, q.Name, f.b, q.Config.MaxBytes)
		default:
			f.n += n
			f.b += bytes
		}
	}
	return nil
}

// buildSegments puts every message that is not a duplicate into its
// partition's segment. Their frames are written as the segments' payloads
// are encoded (segmentPayloads), straight into pgx's parameter buffer.
func (p *pushPlan) buildSegments() {
	p.holds = p.holds[:0]
	// First how many messages each segment takes, so that all their lists
	// share one allocation.
	total := 0
	for i, r := range p.reqs {
		if p.outs[i].Err != nil {
			continue
		}
		for j := range r.Messages {
			pl := &p.places[i][j]
			if pl.dup {
				continue
			}
			seg := p.segs[pl.pid]
			if seg == nil {
				seg = &segmentBuf{id: pl.pid}
				p.segs[pl.pid] = seg
			}
			seg.count++
			total++
		}
	}
	all := make([]*domain.PushMessage, total)
	for _, id := range p.pids {
		if seg := p.segs[id]; seg != nil && seg.msgs == nil {
			seg.msgs, all = all[:0:seg.count], all[seg.count:]
		}
	}
	for i, r := range p.reqs {
		if p.outs[i].Err != nil {
			continue
		}
		for j := range r.Messages {
			pl := &p.places[i][j]
			if pl.dup {
				continue
			}
			seg := p.segs[pl.pid]
			m := &r.Messages[j]
			seg.msgs = append(seg.msgs, m)
			seg.size += frameLen(m.ID, m.Data, m.Headers)
			seg.bytes += int64(m.Size())
			pl.seg, pl.idx = seg, seg.n
			seg.n++
			if m.Delayed() {
				p.holds = append(p.holds, hold{place: pl, delayMS: m.DelayMS, notBefore: m.NotBefore})
			}
		}
	}
}

// segmentArrays returns the segments as the arrays the SQL unnests, in
// partition id order.
func (p *pushPlan) segmentArrays() (pids, ns, bs []int64, payloads segmentPayloads, hot []bool) {
	for _, id := range p.pids {
		seg := p.segs[id]
		if seg == nil {
			continue
		}
		pids = append(pids, id)
		ns = append(ns, seg.n)
		bs = append(bs, seg.bytes)
		payloads = append(payloads, seg)
		hot = append(hot, p.hot[id])
	}
	return pids, ns, bs, payloads, hot
}

// notMadeHere(n) is true of a partition row p unless the push's own
// transaction made it (insertFreshSQL): its version is this transaction's,
// and its id is among the push's fresh ones, parameter $n. The version
// alone is not enough: a push in a comb.txn may update a row its
// transaction updated before, and a frozen row keeps the xid that wrote
// it, which comes round again after 2^32 transactions. The ids are read
// only for rows of this transaction, through a hash: p.id = ANY($n) read
// the whole array for every row, 100 million comparisons for a push making
// 10,000 partitions.
func notMadeHere(n int) string {
	return `(p.xmin = pg_current_xact_id()::xid AND p.id IN (SELECT unnest($` + strconv.Itoa(n) + `::bigint[]))) IS NOT TRUE`
}

var (
	// lockPartitionsSQL locks partitions $1 but those the push made, of
	// its fresh ones $2.
	lockPartitionsSQL = `SELECT id FROM comb_partitions p WHERE id = ANY($1) AND ` + notMadeHere(2) + ` ORDER BY id FOR UPDATE`
	// allocOffsetsSQL allocates the offsets of partitions $1 but those the
	// push made, of its fresh ones $4, which insertFreshSQL counted as it
	// made them. It also starts a partition's low_created_at when it
	// retained nothing (see the sweeper's retentionCandidatesSQL), raises
	// its high_created_at (timeStart: greatest, as a push that started
	// earlier may store after one that started later), and
	// puts the partitions in the ready set (ready.go), each by its row for
	// any group (the sweeper spreads it to the groups), while it holds
	// their rows' locks: a partition already there costs one index probe.
	// A group that starts at the end (from_end, migration 0017) and has no
	// cursor on a partition is at its end; before the push moves the end,
	// it writes that cursor where the push starts, under the same lock, so
	// that the group gets what the push stores. It takes the group's row
	// FOR KEY SHARE as it does, as a pop that makes cursors does
	// (makeMissingCursors): a DeleteGroup waits for the push, and then
	// deletes that cursor too. A group made while the push runs, which
	// this statement does not see, gets none: it takes the push as one
	// before it, and skips what it stores.
	allocOffsetsSQL = `
		WITH u AS (
		    UPDATE comb_partitions p
		    SET next_offset = p.next_offset + x.n, retained_bytes = p.retained_bytes + x.b,
		        low_created_at = CASE WHEN p.next_offset = p.low_offset THEN now()
		                              ELSE coalesce(p.low_created_at, '-infinity') END,
		        high_created_at = greatest(p.high_created_at, now())
		    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(pid, n, b)
		    WHERE p.id = x.pid AND ` + notMadeHere(4) + `
		    RETURNING p.id, p.queue_id, p.next_offset - x.n AS base
		), r AS (
		    INSERT INTO comb_ready (partition_id, group_name, queue_id) SELECT id, ` + anyGroup + `, queue_id FROM u ORDER BY id
		    ON CONFLICT (partition_id, group_name) DO NOTHING
		), m AS (
		    INSERT INTO comb_cursors (partition_id, group_name, queue_id, committed)
		    SELECT u.id, g.name, u.queue_id, u.base
		    FROM u CROSS JOIN LATERAL (
		        SELECT g.name FROM comb_groups g
		        WHERE g.queue_id = u.queue_id AND g.from_end
		          AND NOT EXISTS (SELECT 1 FROM comb_cursors c WHERE c.partition_id = u.id AND c.group_name = g.name)
		        FOR KEY SHARE) g
		    ORDER BY u.id, g.name
		    ON CONFLICT DO NOTHING
		)
		SELECT id, base FROM u`
	// The INSERT runs after the UPDATE in the same transaction, so it reads
	// the advanced next_offset and derives each segment's base from it.
)

// insertSegmentsSQL writes the segments, each into its slot: the current
// hot one for a queue of short retention ($5), the cold one otherwise
// (slots.go).
var insertSegmentsSQL = `
		INSERT INTO comb_segments (partition_id, base_offset, count, bytes, payload, frame_format, slot)
		SELECT x.pid, p.next_offset - x.n, x.n, x.b, x.payload, ` + strconv.Itoa(framesHeaders) + `,
		       CASE WHEN x.hot THEN ` + hotSlotSQL + ` ELSE ` + strconv.Itoa(coldSlot) + ` END
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bool[]) AS x(pid, n, b, payload, hot)
		JOIN comb_partitions p ON p.id = x.pid`

// insertHoldsSQL records the delayed messages of a push and raises their
// partitions' held_until. It runs after allocOffsetsSQL, so a message's
// offset is the partition's new next_offset less its distance from the end
// of the push's segment ($2). A delay counts from the commit's clock, like
// created_at, whichever bridge pushed; not_before ($4) is absolute, and
// GREATEST ignores the one that is NULL. A time already past holds nothing
// and is not recorded.
const insertHoldsSQL = `
		WITH h AS (
		    INSERT INTO comb_holds (partition_id, msg_offset, ready_at)
		    SELECT x.pid, p.next_offset - x.back, r.at
		    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[]) AS x(pid, back, delay, nb)
		    JOIN comb_partitions p ON p.id = x.pid
		    CROSS JOIN LATERAL (SELECT greatest(now() + x.delay * interval '1 millisecond', x.nb) AS at) r
		    WHERE r.at > now()
		    RETURNING partition_id, ready_at)
		UPDATE comb_partitions p SET held_until = greatest(p.held_until, m.ready)
		FROM (SELECT partition_id, max(ready_at) AS ready FROM h GROUP BY partition_id) m
		WHERE p.id = m.partition_id`

// holdArrays returns the holds as the arrays insertHoldsSQL unnests.
func (p *pushPlan) holdArrays() (pids, backs, delays []int64, nbs []*time.Time) {
	for _, h := range p.holds {
		pids = append(pids, h.place.pid)
		backs = append(backs, h.place.seg.n-h.place.idx)
		delays = append(delays, h.delayMS)
		var nb *time.Time
		if !h.notBefore.IsZero() {
			nb = &h.notBefore
		}
		nbs = append(nbs, nb)
	}
	return pids, backs, delays, nbs
}

// queueWrite queues the statements that allocate offsets and write the
// segments (and holds), and returns a function that reads their results.
func (p *pushPlan) queueWrite(b *pgx.Batch, fresh []int64) func(br pgx.BatchResults) error {
	pids, ns, bs, payloads, hot := p.segmentArrays()
	if len(pids) == 0 {
		return func(pgx.BatchResults) error { return nil }
	}
	b.Queue(allocOffsetsSQL, pids, ns, bs, fresh)
	b.Queue(insertSegmentsSQL, pids, ns, bs, payloads, hot)
	holds := len(p.holds) > 0
	if holds {
		hp, hb, hd, hn := p.holdArrays()
		b.Queue(insertHoldsSQL, hp, hb, hd, hn)
	}
	return func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var id, base int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &base}, func() error {
			if seg := p.segs[id]; seg != nil {
				seg.base, seg.ok = base, true
			}
			return nil
		}); err != nil {
			return err
		}
		if _, err = br.Exec(); err != nil || !holds {
			return err
		}
		_, err = br.Exec()
		return err
	}
}

// writer is where a push writes: the pool, a connection of it, or the
// caller's transaction (the drain's, comb.txn's), in which writeDedup's
// transaction is a savepoint.
type writer interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// writeSimple writes a batch without deduplication in one round trip: pgx
// sends the batch with a single Sync, so its statements run in one implicit
// transaction.
//
// Outside a caller's transaction it plans its statements once
// (keyedPlansSQL); inside one it leaves the caller's settings alone.
func (s *Store) writeSimple(ctx context.Context, db writer, p *pushPlan) error {
	b := &pgx.Batch{}
	_, inTx := db.(pgx.Tx)
	if !inTx {
		b.Queue(keyedPlansSQL)
	}
	readFresh := p.queueFresh(b)
	fresh := p.freshPids()
	b.Queue(lockPartitionsSQL, p.pids, fresh)
	read := p.queueWrite(b, fresh)
	readOffers := p.queueOffers(b)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	if !inTx {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := readFresh(br); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	if err := read(br); err != nil {
		return err
	}
	if err := readOffers(br); err != nil {
		return err
	}
	return br.Close()
}

// results fills each outcome's Results from the written segments and
// returns the indexes of the requests whose partitions vanished (their
// queue was deleted under a cached id), for a retry.
func (p *pushPlan) results() (retry []int) {
	for i, r := range p.reqs {
		out := &p.outs[i]
		if out.Err != nil {
			continue
		}
		out.Results = make([]domain.PushResult, len(r.Messages))
		for j, m := range r.Messages {
			pl := &p.places[i][j]
			switch {
			case pl.dup && pl.dupRef != nil && pl.dupRef.seg.ok:
				out.Results[j] = domain.PushResult{Partition: m.Partition, Offset: pl.dupRef.seg.base + pl.dupRef.idx, Status: domain.Duplicate}
			case pl.dup && pl.dupRef == nil:
				out.Results[j] = domain.PushResult{Partition: m.Partition, Offset: pl.dupOf, Status: domain.Duplicate}
			case pl.dup, !pl.seg.ok:
				out.Results = nil
				retry = append(retry, i)
			default:
				out.Results[j] = domain.PushResult{Partition: m.Partition, Offset: pl.seg.base + pl.idx, Status: domain.Stored}
			}
			if out.Results == nil {
				break
			}
		}
	}
	return retry
}
