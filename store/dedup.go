package store

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Deduplication at segment cost.
//
// A push transaction remembers the producer ids it stored as one row per
// partition in comb_dedup_sets (the ids and their offsets as two arrays),
// not one row per message. To find duplicates without reading every set of
// a window, a broker keeps in memory the sets of the partitions it pushes
// to (dedupCache) and, under the partition locks, reads from PostgreSQL
// only the sets it may not have: those at or above the offset up to which
// its copy is complete ("through"), by primary key. That read returns no
// row while this broker is the partition's only writer, the sets of other
// brokers when there are several, and the whole window once after a
// restart. The copy is exact:
//
//   - Under a partition's lock nobody else writes it, so the sets below its
//     next_offset are committed and the read sees all of those at or above
//     "through"; afterwards the copy is complete up to next_offset.
//   - A broker adds its own set only after its commit succeeded. A failed
//     or unknown commit leaves "through" where it was, and the next push
//     reads the set from PostgreSQL if it is there.
//   - Sets leave the copy only once older than the queue's window (plus
//     slack); each removal raises the copy's "horizon", and a push whose
//     window reaches behind the horizon (a window made longer, a
//     transaction that began long ago) reads the whole window again.
//   - Inside a caller's transaction (the spool drain, comb.txn) the sets
//     read may include that transaction's own uncommitted ones: they serve
//     that push only and never enter the copy.
//
// Times are the database's (the transaction's now(), which is also the
// sets' created_at), so no clock skew between broker and database can make
// a lookup wrong; the sweep's eviction of idle partitions uses the local
// clock, and an early eviction costs only a reread.
type dedupCache struct {
	mu    sync.Mutex
	parts map[int64]*dedupPart
	ids   int64 // entries over all partitions
	// hash maps an id to its key in memory; a seeded maphash, but a test
	// may make it collide.
	hash func(string) uint64
}

// dedupSlack is how much longer than its window a set stays in memory:
// concurrent transactions' now() differ by about their own duration, and a
// push whose now() is a little older than the newest must still find the
// sets of its window here.
const dedupSlack = 5 * time.Second

// dedupPart is what the cache knows of one partition. Ids are kept as
// 64-bit hashes, in maps and slices without pointers, so that millions of
// them cost the garbage collector nothing to scan: about 64 bytes each
// (a map entry 56 under constant churn, its set's slice 8), and about
// twice that in resident memory at GOGC 100 (more at comb serve's default
// gc_percent; docs/operations.md). A hash found is only
// a suspect, which the push settles in PostgreSQL (checkSuspectsSQL)
// before it calls the message a duplicate.
type dedupPart struct {
	through int64     // every set with base_offset < through and created after horizon is here
	horizon time.Time // sets created at or before it may be missing
	window  time.Duration
	ids     map[uint64]dedupEntry // by hash: the newest offset, and the newest time, of its ids
	sets    []memSet              // in the order added, for eviction
}

type dedupEntry struct {
	off int64
	at  int64 // unix nanoseconds
}

// memSet is a set as the cache keeps it: the hashes of its ids, stored in
// [base, end).
type memSet struct {
	base, end int64
	at        int64
	hashes    []uint64
}

// dedupSet is a set as PostgreSQL keeps it: ids[k] was stored at offset
// base + rels[k].
type dedupSet struct {
	pid  int64
	base int64
	at   time.Time
	ids  []string
	rels []int32
}

func newDedupCache() *dedupCache {
	seed := maphash.MakeSeed()
	return &dedupCache{parts: map[int64]*dedupPart{}, hash: func(id string) uint64 { return maphash.String(seed, id) }}
}

// throughs returns, per partition, the offset from which to read sets: 0
// for a partition the cache does not hold.
func (c *dedupCache) throughs(pids []int64) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int64, len(pids))
	for i, pid := range pids {
		if p := c.parts[pid]; p != nil {
			out[i] = p.through
		}
	}
	return out
}

// dedupView answers lookups for one push: the cache, plus the sets read in
// this push's transaction when they may not enter the cache.
type dedupView struct {
	c       *dedupCache
	now     time.Time
	overlay map[int64]map[string]dedupEntry // partition id → id → newest offset
}

// resolve takes what a push read under the partition locks (the sets of
// reads[pid], read from throughUsed[pid], or the whole window when 0) and
// either merges it into the cache (shared: the push runs in a transaction
// of its own, so everything it read is committed) or keeps it beside the
// cache for this push alone. It returns the partitions whose window
// reaches behind what is known: those must be read whole (throughUsed 0)
// and resolved again.
func (c *dedupCache) resolve(view *dedupView, shared bool, pids, throughUsed, nexts []int64, windows []time.Duration, reads map[int64][]dedupSet) (reread []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := view.now
	for i, pid := range pids {
		win := windows[i]
		from := now.Add(-win)
		p := c.parts[pid]
		if !shared {
			for _, s := range reads[pid] {
				if view.overlay == nil {
					view.overlay = map[int64]map[string]dedupEntry{}
				}
				m := view.overlay[pid]
				if m == nil {
					m = map[string]dedupEntry{}
					view.overlay[pid] = m
				}
				for k, id := range s.ids {
					m[id] = dedupEntry{off: s.base + int64(s.rels[k]), at: s.at.UnixNano()}
				}
			}
			complete := throughUsed[i] == 0 || (p != nil && p.through >= throughUsed[i] && !p.horizon.After(from))
			if !complete {
				reread = append(reread, pid)
			}
			continue
		}
		if throughUsed[i] == 0 || p == nil {
			if throughUsed[i] != 0 { // evicted since: read the window whole
				reread = append(reread, pid)
				continue
			}
			// Read whole, the window and its slack are complete.
			if p != nil {
				c.ids -= int64(len(p.ids))
			}
			p = &dedupPart{horizon: from.Add(-dedupSlack), ids: map[uint64]dedupEntry{}}
			c.parts[pid] = p
		}
		p.window = win
		for _, s := range reads[pid] {
			if s.base >= p.through { // those below are here already
				c.addLocked(p, s)
			}
		}
		p.through = max(p.through, nexts[i])
		c.evictLocked(p, now.Add(-win-dedupSlack))
		if p.horizon.After(from) {
			reread = append(reread, pid)
		}
	}
	return reread
}

// lookupLocked says whether id may have been stored in partition pid
// within the window, and at which offset. From the sets read in this
// push's transaction the answer is exact (sure); from the cache it is a
// suspect, to confirm. The caller holds v.c.mu.
func (v *dedupView) lookupLocked(pid int64, id string, win time.Duration) (off int64, found, sure bool) {
	from := v.now.Add(-win).UnixNano()
	if e, ok := v.overlay[pid][id]; ok && e.at > from {
		return e.off, true, true
	}
	p := v.c.parts[pid]
	if p == nil {
		return 0, false, false
	}
	e, ok := p.ids[v.c.hash(id)]
	if !ok || e.at <= from {
		return 0, false, false
	}
	return e.off, true, false
}

// dedupSuspect is an id the cache holds a hash of, with the newest offset
// behind that hash.
type dedupSuspect struct {
	key dedupKey
	off int64
}

// known returns the keys stored within their partition's window, with the
// newest offset of each: from the sets read in this transaction directly,
// and from the cache's suspects through check, which returns per suspect
// the id's newest offset within the window, or -1.
func (v *dedupView) known(keys []dedupKey, wins map[int64]time.Duration, check func([]dedupSuspect) ([]int64, error)) (map[dedupKey]int64, error) {
	out := map[dedupKey]int64{}
	var sus []dedupSuspect
	v.c.mu.Lock() // once for the push's ids, not once per message
	for _, k := range keys {
		off, found, sure := v.lookupLocked(k.pid, k.id, wins[k.pid])
		switch {
		case sure:
			out[k] = off
		case found:
			sus = append(sus, dedupSuspect{key: k, off: off})
		}
	}
	v.c.mu.Unlock()
	if len(sus) == 0 {
		return out, nil
	}
	offs, err := check(sus)
	if err != nil {
		return nil, err
	}
	for i, s := range sus {
		if offs[i] >= 0 {
			out[s.key] = offs[i]
		}
	}
	return out, nil
}

// committed adds the sets a push stored, once its transaction committed:
// the cache is then complete up to each set's end.
func (c *dedupCache) committed(sets []dedupSet, ends []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range sets {
		p := c.parts[s.pid]
		if p == nil || p.through != s.base {
			continue // evicted; reset by a reread that has it; or merged already by a later push's read
		}
		c.addLocked(p, s)
		p.through = max(p.through, ends[i])
	}
}

func (c *dedupCache) addLocked(p *dedupPart, s dedupSet) {
	m := memSet{base: s.base, end: s.base, at: s.at.UnixNano(), hashes: make([]uint64, len(s.ids))}
	for k, id := range s.ids {
		off := s.base + int64(s.rels[k])
		m.end = max(m.end, off+1)
		h := c.hash(id)
		m.hashes[k] = h
		e, ok := p.ids[h]
		if !ok {
			c.ids++
		}
		// The newest offset, and the newest time of any set behind the
		// hash: two ids that share it are both suspects while either is.
		p.ids[h] = dedupEntry{off: max(e.off, off), at: max(e.at, m.at)}
	}
	p.sets = append(p.sets, m)
}

// evictLocked forgets the sets created before cut, from the oldest added,
// and raises the horizon to the newest of them. An entry goes with the set
// that holds its offset, unless a newer set shares its hash.
func (c *dedupCache) evictLocked(p *dedupPart, cut time.Time) {
	n, cutNS := 0, cut.UnixNano()
	for n < len(p.sets) && p.sets[n].at < cutNS {
		s := p.sets[n]
		for _, h := range s.hashes {
			if e, ok := p.ids[h]; ok && e.off >= s.base && e.off < s.end && e.at <= s.at {
				delete(p.ids, h)
				c.ids--
			}
		}
		if at := time.Unix(0, s.at); at.After(p.horizon) {
			p.horizon = at
		}
		n++
	}
	if n > 0 {
		p.sets = slices.Delete(p.sets, 0, n)
	}
}

// expire forgets, by the local clock, the sets past their partition's last
// window, and the partitions left with none: the sweep calls it, so that
// partitions no longer pushed to do not keep their ids.
func (c *dedupCache) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid, p := range c.parts {
		c.evictLocked(p, now.Add(-p.window-2*dedupSlack))
		if len(p.sets) == 0 {
			c.ids -= int64(len(p.ids))
			delete(c.parts, pid)
		}
	}
}

// DedupCache returns what the store's dedup cache holds: the partitions and
// the ids (of every queue with a dedup window that this store pushed to
// within the window).
func (s *Store) DedupCache() (partitions, ids int64) { return s.dedup.size() }

// size returns the partitions and ids the cache holds.
func (c *dedupCache) size() (parts, ids int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.parts)), c.ids
}

const (
	// lockDedupPartitionsSQL locks like lockPartitionsSQL and returns each
	// partition's next offset (under the lock: where this push's segment
	// begins) and the transaction's time, which is its sets' created_at.
	lockDedupPartitionsSQL = `SELECT id, next_offset, now() FROM comb_partitions WHERE id = ANY($1) ORDER BY id FOR UPDATE`
	// readDedupSetsSQL reads each partition's sets at or above an offset,
	// by primary key: all of them, whatever their age, since "through" is
	// complete for every age; or, from offset 0 (a partition the cache does
	// not hold), those younger than $3 seconds, the window and its slack.
	// The ORDER BY keeps the subquery from being pulled up into a join: a
	// generic plan of the join read the whole table (8 ms at 15,000 sets
	// against 0.1 ms by key).
	readDedupSetsSQL = `
		SELECT s.partition_id, s.base_offset, s.created_at, s.ids, s.rels
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(pid, through, win)
		CROSS JOIN LATERAL (
		    SELECT s.partition_id, s.base_offset, s.created_at, s.ids, s.rels FROM comb_dedup_sets s
		    WHERE s.partition_id = x.pid AND s.base_offset >= x.through
		      AND (x.through > 0 OR s.created_at > now() - x.win * interval '1 second')
		    ORDER BY s.base_offset) s`
	// checkSuspectsSQL answers, per suspect (partition, offset the cache
	// holds for the id's hash, id, window in seconds), the id's newest
	// offset within the window, or NULL: the set holding that offset says
	// whether the id is there; only when it is not (another id with the
	// same hash) does it look through every set of the window.
	checkSuspectsSQL = `
		SELECT CASE WHEN EXISTS (
		    SELECT 1 FROM (
		        SELECT s.base_offset, s.created_at, s.ids, s.rels FROM comb_dedup_sets s
		        WHERE s.partition_id = x.pid AND s.base_offset <= x.off
		        ORDER BY s.base_offset DESC LIMIT 1) s
		    WHERE s.created_at > now() - x.win * interval '1 second'
		      AND s.ids[array_position(s.rels, (x.off - s.base_offset)::int)] = x.id)
		  THEN x.off
		  ELSE (
		    SELECT max(s.base_offset + r.rel) FROM comb_dedup_sets s
		    CROSS JOIN LATERAL unnest(s.ids, s.rels) AS r(id, rel)
		    WHERE s.partition_id = x.pid AND x.id = ANY(s.ids) AND r.id = x.id
		      AND s.created_at > now() - x.win * interval '1 second')
		  END
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[]) WITH ORDINALITY AS x(pid, off, id, win, i)
		ORDER BY x.i`
	// insertDedupSetSQL writes one set. One statement per set, in the
	// push's batch: building the arrays in PostgreSQL from flat ones
	// (unnest, array_agg) cost 2.25 ms a push at 400 ids.
	insertDedupSetSQL = `
		INSERT INTO comb_dedup_sets (partition_id, base_offset, queue_id, ids, rels)
		VALUES ($1, $2, $3, $4, $5)`
)

// dedupKey is one id of a push to look up.
type dedupKey struct {
	pid int64
	id  string
}

// writeDedup writes a batch in which some messages carry producer ids of a
// queue with a dedup window. Under the partition locks it reads the sets
// the cache may lack, drops the duplicates (of earlier pushes, or of each
// other in this batch), writes the rest and their set, in one transaction
// of two round trips when db is the pool (BEGIN travels with the first,
// COMMIT with the second); in the caller's transaction (a savepoint)
// otherwise.
func (s *Store) writeDedup(ctx context.Context, db writer, p *pushPlan) error {
	// The partitions with ids to look up, and their windows.
	wins := map[int64]time.Duration{}
	for i, r := range p.reqs {
		w := p.queues[i].Config.DedupWindowS
		if p.outs[i].Err != nil || w == 0 {
			continue
		}
		for j, m := range r.Messages {
			if m.ID != "" {
				wins[p.places[i][j].pid] = time.Duration(w) * time.Second
			}
		}
	}
	dpids := make([]int64, 0, len(wins))
	for pid := range wins {
		dpids = append(dpids, pid)
	}
	slices.Sort(dpids)
	dwins := make([]time.Duration, len(dpids))
	winS := make([]int64, len(dpids))
	for i, pid := range dpids {
		dwins[i], winS[i] = wins[pid], int64((wins[pid]+dedupSlack+time.Second-1)/time.Second)
	}
	through := s.dedup.throughs(dpids)

	// With the pool, the push is a transaction of its own on one
	// connection: BEGIN travels with the first batch and COMMIT with the
	// second. A connection left inside the transaction by an error is
	// destroyed on release, which rolls it back. Otherwise db.Begin is a
	// savepoint in the caller's transaction.
	pool, shared := db.(*pgxpool.Pool)
	var q writer
	var tx pgx.Tx
	if shared {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		q = conn
	} else {
		var err error
		if tx, err = db.Begin(ctx); err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		q = tx
	}

	b := &pgx.Batch{}
	if shared {
		b.Queue("BEGIN")
		b.Queue(keyedPlansSQL)
	}
	b.Queue(lockDedupPartitionsSQL, p.pids)
	b.Queue(readDedupSetsSQL, dpids, through, winS)
	br := q.SendBatch(ctx, b)
	if shared {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
	}
	next := map[int64]int64{}
	var now time.Time
	{
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return err
		}
		var pid, off int64
		if _, err := pgx.ForEachRow(rows, []any{&pid, &off, &now}, func() error {
			next[pid] = off
			return nil
		}); err != nil {
			br.Close()
			return err
		}
	}
	reads, err := readDedupSets(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	nexts := make([]int64, len(dpids))
	for i, pid := range dpids {
		nexts[i] = next[pid]
	}
	view := &dedupView{c: s.dedup, now: now}
	if again := s.dedup.resolve(view, shared, dpids, through, nexts, dwins, reads); len(again) > 0 {
		// The window reaches behind what the cache holds: read it whole.
		idx := make([]int, len(again))
		for k, pid := range again {
			idx[k], _ = slices.BinarySearch(dpids, pid)
		}
		w, zero, n, d := make([]int64, len(again)), make([]int64, len(again)), make([]int64, len(again)), make([]time.Duration, len(again))
		for k, i := range idx {
			w[k], n[k], d[k] = winS[i], nexts[i], dwins[i]
		}
		b := &pgx.Batch{}
		b.Queue(readDedupSetsSQL, again, zero, w)
		br := q.SendBatch(ctx, b)
		reads, err := readDedupSets(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if still := s.dedup.resolve(view, shared, again, zero, n, d, reads); len(still) > 0 {
			return fmt.Errorf("dedup: partitions %v: the window read whole is still incomplete", still) // cannot happen
		}
	}

	// The ids remembered, confirmed in PostgreSQL where the cache only
	// suspects them.
	var keys []dedupKey
	seen := map[dedupKey]bool{}
	for i, r := range p.reqs {
		if p.outs[i].Err != nil || p.queues[i].Config.DedupWindowS == 0 {
			continue
		}
		for j, m := range r.Messages {
			if k := (dedupKey{p.places[i][j].pid, m.ID}); m.ID != "" && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	known, err := view.known(keys, wins, func(sus []dedupSuspect) ([]int64, error) {
		return checkSuspects(ctx, q, sus, wins)
	})
	if err != nil {
		return err
	}

	// Mark duplicates: of a remembered message, or of an earlier message
	// of this batch.
	first := map[dedupKey]*msgPlace{}
	for i, r := range p.reqs {
		if p.outs[i].Err != nil || p.queues[i].Config.DedupWindowS == 0 {
			continue
		}
		for j, m := range r.Messages {
			if m.ID == "" {
				continue
			}
			pl := &p.places[i][j]
			k := dedupKey{pl.pid, m.ID}
			if off, ok := known[k]; ok {
				pl.dup, pl.dupOf = true, off
			} else if orig, ok := first[k]; ok {
				pl.dup, pl.dupRef = true, orig
			} else {
				first[k] = pl
			}
		}
	}
	p.buildSegments()

	// The sets: per partition, the ids stored and their index in its
	// segment, whose base is the next_offset read under the lock.
	sets := map[int64]*dedupSet{}
	for i, r := range p.reqs {
		if p.outs[i].Err != nil || p.queues[i].Config.DedupWindowS == 0 {
			continue
		}
		for j, m := range r.Messages {
			pl := &p.places[i][j]
			if k := (dedupKey{pl.pid, m.ID}); m.ID == "" || first[k] != pl {
				continue
			}
			if _, ok := next[pl.pid]; !ok {
				continue // the partition vanished (its queue deleted): the push is retried
			}
			st := sets[pl.pid]
			if st == nil {
				st = &dedupSet{pid: pl.pid, base: next[pl.pid], at: now}
				sets[pl.pid] = st
			}
			st.ids = append(st.ids, m.ID)
			st.rels = append(st.rels, int32(pl.idx))
		}
	}
	b = &pgx.Batch{}
	read := p.queueWrite(b, nil) // it makes no partition
	for _, pid := range dpids {
		if st := sets[pid]; st != nil {
			b.Queue(insertDedupSetSQL, pid, st.base, p.queue[pid], st.ids, st.rels)
		}
	}
	if shared {
		b.Queue("COMMIT")
	}
	br = q.SendBatch(ctx, b)
	err = read(br)
	for range len(sets) {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil && shared {
		_, err = br.Exec() // COMMIT
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if !shared {
		return tx.Commit(ctx) // the savepoint's release
	}
	{
		done := make([]dedupSet, 0, len(sets))
		ends := make([]int64, 0, len(sets))
		for _, pid := range dpids {
			if st := sets[pid]; st != nil {
				done = append(done, *st)
				ends = append(ends, st.base+p.segs[pid].n)
			}
		}
		s.dedup.committed(done, ends)
	}
	return nil
}

// checkSuspects runs checkSuspectsSQL in the push's transaction.
func checkSuspects(ctx context.Context, q writer, sus []dedupSuspect, wins map[int64]time.Duration) ([]int64, error) {
	pids, offs, wsec := make([]int64, len(sus)), make([]int64, len(sus)), make([]int64, len(sus))
	ids := make([]string, len(sus))
	for i, s := range sus {
		pids[i], offs[i], ids[i], wsec[i] = s.key.pid, s.off, s.key.id, int64(wins[s.key.pid]/time.Second)
	}
	b := &pgx.Batch{}
	b.Queue(checkSuspectsSQL, pids, offs, ids, wsec)
	br := q.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	out := make([]int64, 0, len(sus))
	var off *int64
	if _, err := pgx.ForEachRow(rows, []any{&off}, func() error {
		if off == nil {
			out = append(out, -1)
		} else {
			out = append(out, *off)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(out) != len(sus) {
		return nil, fmt.Errorf("dedup: %d answers to %d suspects", len(out), len(sus))
	}
	return out, br.Close()
}

// readDedupSets reads readDedupSetsSQL's rows by partition.
func readDedupSets(br pgx.BatchResults) (map[int64][]dedupSet, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	out := map[int64][]dedupSet{}
	var s dedupSet
	_, err = pgx.ForEachRow(rows, []any{&s.pid, &s.base, &s.at, &s.ids, &s.rels}, func() error {
		out[s.pid] = append(out[s.pid], s)
		s.ids, s.rels = nil, nil
		return nil
	})
	for _, sets := range out { // in offset order, whatever the plan
		slices.SortFunc(sets, func(a, b dedupSet) int { return cmp.Compare(a.base, b.base) })
	}
	return out, err
}
