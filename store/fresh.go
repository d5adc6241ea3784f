package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// A push to a partition that does not exist yet creates it in the push's
// own transaction, in the same round trip, instead of a transaction of its
// own before it (createPartitions): at 100 messages a push spread one
// partition a push, that first transaction was a third of the push's time
// (docs/benchmarks.md).
//
// The push's statements name partitions by id, so the id of a new one is
// taken from the partitions' sequence beforehand (reserveIDs, in blocks)
// and inserted with it. That is only right for a name that is truly new,
// and a cache miss alone does not say so: after a restart every name is a
// miss. So the store first reads all of a queue's partitions into the
// cache, once (knownPartitions), for a queue of at most preloadLimit of
// them; from then on a name missing from the cache is new. A queue with
// more has the names a push misses looked up first, one query for them
// all, and those not found are new (freshIDs). Either way another bridge
// may make the partition meanwhile. In that case the insert does nothing,
// the push's statements find no row under the reserved id and store
// nothing there, and the push goes once more the old way (PushOffer's
// retry), which looks the partition up and keeps what else the store
// knows of the queue.
//
// Until the push that creates a partition commits, its reserved id is
// pending: a second push of this store to the same new name takes the same
// id, and its insert waits on the first one's and then finds the row.

// preloadLimit is the most partitions a queue may have for the store to
// read them all into its cache; a push to a queue with more looks up the
// names it misses before it makes the new ones. A variable for tests.
var preloadLimit = 100_000

// reserveBlock is how many partition ids reserveIDs takes from the
// sequence at a time.
const reserveBlock = 256

const (
	// preloadPartitionsSQL reads a queue's partitions into the cache, up to
	// $2 of them (knownPartitions).
	preloadPartitionsSQL = `SELECT name, id FROM comb_partitions WHERE queue_id = $1 LIMIT $2`
	// reserveIDsSQL takes $1 partition ids from the sequence (reserveIDs).
	reserveIDsSQL = `SELECT nextval('comb_partitions_id_seq'::regclass) FROM generate_series(1, $1)`
)

// freshPartition is a partition a push creates in its own transaction.
type freshPartition struct {
	queue int64
	name  string
	id    int64
}

// Values of Store.complete.
const (
	partsUnread   = 0 // not read yet
	partsComplete = 1 // every partition of the queue is in the cache
	partsTooMany  = 2 // over preloadLimit: the names a push misses are looked up
)

// knownPartitions reports whether every partition of q is in the cache,
// reading them all first if that was not done yet.
func (s *Store) knownPartitions(ctx context.Context, q queueRow) (bool, error) {
	s.mu.Lock()
	state := s.complete[q.ID]
	s.mu.Unlock()
	switch state {
	case partsComplete:
		return true, nil
	case partsTooMany:
		return false, nil
	}
	rows, err := s.pool.Query(ctx, preloadPartitionsSQL, q.ID, preloadLimit+1)
	if err != nil {
		return false, fmt.Errorf("read partitions: %w", classify(err))
	}
	found, err := collectNameIDs(rows)
	if err != nil {
		return false, fmt.Errorf("read partitions: %w", classify(err))
	}
	state = partsComplete
	if len(found) > preloadLimit {
		state = partsTooMany
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cq, ok := s.queues[q.ref()]; !ok || cq.q.ID != q.ID {
		return false, nil // forgotten meanwhile: read again next time
	}
	for n, id := range found {
		s.parts[partKey{q.ID, n}] = id
	}
	s.complete[q.ID] = state
	return state == partsComplete, nil
}

// freshIDs maps the partition names of q to ids: a cached one, or for a
// new name the id reserved for it, which it also returns in fresh for the
// push to create. With lookup, q's partitions are not all cached
// (knownPartitions), and it first looks up the names missing from the
// cache; those PostgreSQL has not are new.
func (s *Store) freshIDs(ctx context.Context, q queueRow, names []string, lookup bool) (ids map[string]int64, fresh []freshPartition, err error) {
	ids = make(map[string]int64, len(names))
	var missing []string
	s.mu.Lock()
	for _, n := range names {
		k := partKey{q.ID, n}
		if id, ok := s.parts[k]; ok {
			ids[n] = id
		} else if id, ok := s.pending[k]; ok {
			ids[n] = id
			fresh = append(fresh, freshPartition{q.ID, n, id})
		} else {
			missing = append(missing, n)
		}
	}
	s.mu.Unlock()
	if lookup && len(missing) > 0 {
		found, err := s.partitionIDs(ctx, q, missing, false) // caches what it finds
		if err != nil {
			return nil, nil, err
		}
		for n, id := range found {
			ids[n] = id
		}
		missing = slices.DeleteFunc(missing, func(n string) bool { _, ok := found[n]; return ok })
	}
	if len(missing) == 0 {
		return ids, fresh, nil
	}
	reserved, err := s.reserveIDs(ctx, len(missing))
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, n := range missing {
		k := partKey{q.ID, n}
		// Another push may have made it meanwhile, or be making it.
		if id, ok := s.parts[k]; ok {
			ids[n] = id
			continue
		}
		id, ok := s.pending[k]
		if !ok {
			id = reserved[i]
			s.pending[k] = id
		}
		ids[n] = id
		fresh = append(fresh, freshPartition{q.ID, n, id})
	}
	return ids, fresh, nil
}

// reserveIDs returns n partition ids from the sequence, never handed out
// before; ids reserved and not used are gaps, which cost nothing.
func (s *Store) reserveIDs(ctx context.Context, n int) ([]int64, error) {
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	if len(s.reserved) < n {
		// The sequence by name, resolved once: pg_get_serial_sequence in
		// the select list runs for every row (48 ms for 10,000 ids,
		// against 3 ms).
		rows, err := s.pool.Query(ctx, reserveIDsSQL, n-len(s.reserved)+reserveBlock)
		if err != nil {
			return nil, fmt.Errorf("reserve partition ids: %w", classify(err))
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, fmt.Errorf("reserve partition ids: %w", classify(err))
		}
		s.reserved = append(s.reserved, ids...)
	}
	out := slices.Clone(s.reserved[:n])
	s.reserved = s.reserved[n:]
	return out, nil
}

// The statements that create a push's fresh partitions, first in its
// batch, in the order createPartitions runs them: the queues' rows FOR KEY
// SHARE (ordering the creation against a group's, members.go), then the
// partitions in (queue, name) order so that two pushes creating the same
// ones wait for each other instead of deadlocking. A queue deleted
// meanwhile gets none (the join), and the push stores nothing there. Each
// is its own statement, so that the later one sees what committed while
// the first waited for its locks. Cursors are made only for the groups
// whose waiting pops the push offers the new partitions (a hand-off needs
// the cursor's row, handoffSQL): every other group's is made by its first
// pop that finds messages there (makeMissingCursors). With every cursor
// left to the pops, the first message of each new partition missed its
// hand-off, and the first second's e2e p99 at 1,000 single-message puts
// a second went from 29 ms to 105–111 ms (docs/benchmarks.md, "Lazy
// cursors"). The queue's row, FOR KEY SHARE since the first statement,
// keeps a DeleteGroup out until the push commits, so no cursor outlives
// its group.
const (
	lockFreshQueuesSQL = `SELECT id FROM comb_queues WHERE id = ANY($1) ORDER BY id FOR KEY SHARE`
	// insertFreshSQL creates the partitions with what the push stores in
	// them ($4 messages, $5 bytes) already counted, and puts those it
	// stores in into the ready set, as allocOffsetsSQL does for the others:
	// a row the push made is not updated again (lockPartitionsSQL and
	// allocOffsetsSQL pass over it: notMadeHere). Updating it was half of
	// the push's time in PostgreSQL when it created 10,000 partitions (an
	// UPDATE moving low_created_at, so not HOT: three more index entries a
	// row). It returns the ids it made: a partition that another push of
	// this store made meanwhile under the same reserved id is updated like
	// any other.
	//
	// A queue with no group gets no ready row for its new partitions: the
	// sweeper would only delete it again (no group is behind), and the
	// group made later puts the partitions it starts short of the end in
	// the ready set itself (makeGroup, markReadySQL). The queue row's lock,
	// FOR KEY SHARE since lockFreshQueuesSQL, orders the two: a group made
	// before it is seen here, and one made after it waits for this push to
	// commit and then sees its partitions.
	//
	// A group that starts at the end (from_end) gets its cursor at 0 on
	// each partition made: its missing cursor would be at the end, past
	// what this push stores there.
	insertFreshSQL = `
		WITH i AS (
		    INSERT INTO comb_partitions (id, queue_id, name, next_offset, retained_bytes, low_created_at, high_created_at)
		    SELECT x.id, x.qid, x.name, x.n, x.b, CASE WHEN x.n > 0 THEN now() END, CASE WHEN x.n > 0 THEN now() END
		    FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[]) AS x(id, qid, name, n, b)
		    JOIN comb_queues q ON q.id = x.qid
		    ORDER BY x.qid, x.name
		    ON CONFLICT DO NOTHING
		    RETURNING id, queue_id, next_offset
		), r AS (
		    INSERT INTO comb_ready (partition_id, group_name, queue_id)
		    SELECT id, ` + anyGroup + `, queue_id FROM i
		    WHERE next_offset > 0 AND EXISTS (SELECT 1 FROM comb_groups g WHERE g.queue_id = i.queue_id)
		    ORDER BY id
		    ON CONFLICT (partition_id, group_name) DO NOTHING
		), c AS (
		    INSERT INTO comb_cursors (partition_id, group_name, queue_id)
		    SELECT i.id, g.name, i.queue_id FROM i JOIN comb_groups g ON g.queue_id = i.queue_id AND g.from_end
		    ORDER BY i.id, g.name
		    ON CONFLICT DO NOTHING
		)
		SELECT id FROM i`
	insertFreshCursorsSQL = `
		INSERT INTO comb_cursors (partition_id, group_name, queue_id)
		SELECT p.id, g.name, p.queue_id
		FROM unnest($1::bigint[], $2::text[]) AS x(pid, grp)
		JOIN comb_partitions p ON p.id = x.pid
		JOIN comb_groups g ON g.queue_id = p.queue_id AND g.name = x.grp
		ORDER BY p.id, g.name
		ON CONFLICT DO NOTHING`
)

// freshPids returns the ids of the plan's fresh partitions.
func (p *pushPlan) freshPids() []int64 {
	ids := make([]int64, len(p.fresh))
	for i, f := range p.fresh {
		ids[i] = f.id
	}
	return ids
}

// queueFresh queues the creation of the plan's fresh partitions, if any,
// each with what the push stores in it, and returns a function that reads
// its results: a segment in a partition the push made starts at offset 0.
func (p *pushPlan) queueFresh(b *pgx.Batch) func(br pgx.BatchResults) error {
	if len(p.fresh) == 0 {
		return func(pgx.BatchResults) error { return nil }
	}
	ids := p.freshPids()
	qids := make([]int64, len(p.fresh))
	names := make([]string, len(p.fresh))
	ns := make([]int64, len(p.fresh))
	bs := make([]int64, len(p.fresh))
	var queues []int64
	for i, f := range p.fresh {
		qids[i], names[i] = f.queue, f.name
		if seg := p.segs[f.id]; seg != nil {
			ns[i], bs[i] = seg.n, seg.bytes
		}
		if !slices.Contains(queues, f.queue) {
			queues = append(queues, f.queue)
		}
	}
	b.Queue(lockFreshQueuesSQL, queues)
	b.Queue(insertFreshSQL, ids, qids, names, ns, bs)
	var pids []int64
	var groups []string
	for _, o := range p.offers {
		if slices.Contains(ids, o.stored.seg.id) {
			pids, groups = append(pids, o.stored.seg.id), append(groups, o.group)
		}
	}
	cursors := len(pids) > 0
	if cursors {
		b.Queue(insertFreshCursorsSQL, pids, groups)
	}
	return func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var id int64
		if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			if seg := p.segs[id]; seg != nil {
				seg.base, seg.ok = 0, true
			}
			return nil
		}); err != nil {
			return err
		}
		if cursors {
			_, err = br.Exec()
		}
		return err
	}
}

// settleFresh caches the fresh partitions the committed push stored in:
// their rows exist under the reserved ids. One it did not store in was
// made by someone else under another id (or its queue was deleted): its
// reserved id is dropped, and PushOffer's retry looks the name up.
func (s *Store) settleFresh(p *pushPlan) {
	if len(p.fresh) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range p.fresh {
		k := partKey{f.queue, f.name}
		if seg := p.segs[f.id]; seg != nil && seg.ok {
			s.parts[k] = f.id
		}
		if s.pending[k] == f.id {
			delete(s.pending, k)
		}
	}
}

// queueUnchanged reports whether the queue the store has cached as ref is
// still in PostgreSQL under the same id. Partitions are only ever deleted
// with their queue, so then every partition id cached for it is good.
func (s *Store) queueUnchanged(ctx context.Context, ref domain.QueueRef) bool {
	s.mu.Lock()
	cq, ok := s.queues[ref]
	s.mu.Unlock()
	if !ok {
		return false
	}
	q, err := s.loadQueue(ctx, s.pool, ref)
	return err == nil && q.ID == cq.q.ID
}
