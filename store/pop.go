package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// popSQL claims up to $4 ready cursors of a group with SKIP LOCKED (a claim
// never waits on another consumer), spreads $5 messages over them in order,
// leases each claimed range, and reads the segments that hold the ranges —
// all in one statement and one round trip.
//
// Cursors are claimed least recently leased first, which spreads pops over
// partitions. (n is cast back to bigint: sum() over bigint is numeric, and a
// numeric lease bound would turn the segment lookup's index condition into a
// filter.) A cursor is ready when its partition has messages past the
// committed offset and it holds no live lease, so a group holds at most one
// lease per partition and gets a partition's messages in offset order.
//
// The ready cursors it finds but does not lease (up to readyReportMax of them)
// come back too, by name, with how many were ready: the bridge keeps them
// as the only partitions that can be ready until a wake-up names more (see
// PopResult), and its next pops find their cursors by key instead of
// reading every cursor of the group again.
//
// It reads the group's cursors of the partitions in the ready set only
// (comb_ready, ready.go): every other partition has all its cursors at
// its end, so its cost follows the partitions with messages, not the
// queue's.
var popSQL = popScan(heldEnd(`p.next_offset`), anyPartition)

// popPartitionSQL is popSQL for a pop that names its partition ($3): it
// finds the one cursor by its key. One statement for both would test
// "$3 = 0 OR c.partition_id = $3", which a generic plan cannot answer from
// the key, so it read every cursor of the group to pop one partition.
var popPartitionSQL = popOne(heldEnd(`p.next_offset`))

// popCandidatesSQL is popSQL for a pop limited to candidate partitions
// ($3, an array of ids; PopParams.Candidates): it finds their cursors by
// key, so its cost is that of the candidates, not of the group's cursors.
var popCandidatesSQL = popScan(heldEnd(`p.next_offset`), somePartitions)

const (
	// anyPartition marks a scan over the ready set's rows (readyCursors,
	// queue $1's and group $2's), from after partition id $3: popScan
	// writes its own conditions for it.
	anyPartition = `$3::bigint >= 0`
	onePartition = `c.partition_id = $3 AND c.group_name = $2 AND c.queue_id = $1`
	// somePartitions leaves out the queue (its ids are the queue's): with
	// "c.queue_id = $1" a generic plan read every cursor of the group
	// through (queue_id, group_name) and filtered the ids, where this
	// finds each partition, and its cursor, by key.
	somePartitions = `p.id = ANY($3::bigint[]) AND $1::bigint > 0`
)

// readyReportMax is how many ready cursors a pop that reads many (every
// cursor of its group, or its candidates) reports beyond those it leases.
const readyReportMax = 64

// popDelayedSQL serves queues with a delay_ms: a partition's ready end is the
// end of its newest segment older than the delay ($9 ms), found by a
// backward index scan that stops at the first such segment.
var (
	popDelayedSQL           = popScan(heldEnd(delayedEnd), anyPartition)
	popDelayedPartitionSQL  = popOne(heldEnd(delayedEnd))
	popDelayedCandidatesSQL = popScan(heldEnd(delayedEnd), somePartitions)
)

// heldEnd bounds a partition's ready end by its first pending hold (a
// message pushed with delay_ms or not_before, comb_holds) at or past the
// cursor: that message and the ones after it wait, so the partition keeps
// its order. Only a partition whose held_until is still ahead looks for
// holds; LEAST ignores the NULL of every other.
func heldEnd(end string) string {
	return `least(` + end + `, CASE WHEN p.held_until > now() THEN (
        SELECT h.msg_offset FROM comb_holds h
        WHERE h.partition_id = p.id AND h.msg_offset >= greatest(c.committed, p.low_offset)
          AND h.ready_at > now()
        ORDER BY h.msg_offset LIMIT 1) END)`
}

const delayedEnd = `coalesce((
        SELECT s.base_offset + s.count FROM comb_segments s
        WHERE s.partition_id = p.id AND s.created_at <= now() - $9::bigint * interval '1 millisecond'
        ORDER BY s.base_offset DESC LIMIT 1), p.low_offset)`

// cursorReady is the condition of a cursor c that a pop may lease, end
// being its partition p's ready end: messages past what the group has
// committed, and no live lease. A group holds at most one lease per
// partition, so it gets a partition's messages in offset order.
//
// c may be a missing cursor, all NULLs (a LEFT JOIN): cursors are made
// lazily (see makeMissingCursors), and a group with no cursor on a
// partition is at its oldest retained message with nothing leased, which
// is what the condition reads of NULLs (greatest ignores them).
func cursorReady(end string) string {
	return end + ` > greatest(c.committed, p.low_offset) AND (c.lease_id IS NULL OR c.lease_until < now())`
}

// notMissingAtEnd is the condition of a cursor c of group on queue qid,
// read through a LEFT JOIN, that it is not the missing cursor of a group
// that starts at the end (comb_groups.from_end, migration 0017): that one
// is at its partition's end, with nothing to pop, where cursorReady reads
// every missing cursor at the oldest retained message. A statement that
// reads missing cursors ANDs it to cursorReady. With qid and group
// parameters, its subquery does not depend on the row: PostgreSQL runs it
// once, and only if a cursor is missing.
func notMissingAtEnd(qid, group string) string {
	return `(c.partition_id IS NOT NULL OR NOT EXISTS (
        SELECT 1 FROM comb_groups g WHERE g.queue_id = ` + qid + ` AND g.name = ` + group + ` AND g.from_end))`
}

// groupAt is where group g stands on partition p, c being its cursor
// there or NULLs (a LEFT JOIN): its committed offset; without one, the
// partition's end for a group that starts at the end (from_end, migration
// 0017), the first message pushed at or after the time of one that starts
// at a time (from_time, migration 0019), the oldest retained message for
// any other. The figures of groups, retention and the ready set's upkeep
// read it.
var groupAt = `greatest(coalesce(c.committed, CASE WHEN g.from_end THEN p.next_offset
        WHEN g.from_time IS NOT NULL THEN ` + timeStart(`g.from_time`) + ` END), p.low_offset)`

// groupMayPop is the test that a pop of group (an SQL expression) on the
// queue whose id is qid may find messages: one of its cursors is ready at
// its partition's end. It leaves out holds and queue delays, so it may say
// yes where a pop would find nothing yet, never no where it would find
// something.
//
// It reads the ready set (readyCursors): its cost follows the partitions
// that may have messages, not the queue's. A group whose marking is
// unfinished (migration 0018) may pop too: its pop marks the next
// partitions (markFor).
func groupMayPop(qid, group string) string {
	return `(EXISTS (
        SELECT 1 FROM ` + readyCursors(qid, group, readyRows{}) + `
        WHERE ` + cursorReady(`p.next_offset`) + ` AND ` + notMissingAtEnd(qid, group) + `)
     OR EXISTS (SELECT 1 FROM comb_groups g WHERE g.queue_id = ` + qid + ` AND g.name = ` + group + `
                AND g.unmarked_after IS NOT NULL))`
}

// readyCursors joins the partitions y of queue qid's ready rows of group
// (its own and those of pushes, anyGroup) to their partitions p and the
// group's cursors c: the cursors a scan of a whole group reads. A cursor
// missing from it is at its partition's end (the invariant of ready.go);
// the rows of the queue's other groups are not read. rows narrows the
// rows read (readyRows).
//
// The cursor and the partition come from subqueries PostgreSQL cannot
// pull up (OFFSET 0), so that both are read by key from each row, the set
// first whatever the statistics say. As joins, a generic plan made without
// statistics started from the group's cursors, all of them, and looked
// each one up in the set (TestHotPlansByKey); one made while the set held
// every partition (just after a million were created) read every
// partition, and kept doing so on its connection once the set was small.
//
// A partition where the group has no cursor yet comes with a cursor of
// NULLs (cursorReady).
func readyCursors(qid, group string, rows readyRows) string {
	own := `SELECT r.partition_id FROM comb_ready r
            WHERE r.queue_id = ` + qid + ` AND r.group_name = ` + group + rows.idCond()
	// A partition with a row of the group and one of a push comes once.
	pushes := `SELECT r.partition_id FROM comb_ready r
            WHERE r.queue_id = ` + qid + ` AND r.group_name = ` + anyGroup + rows.idCond() + `
              AND NOT EXISTS (SELECT 1 FROM comb_ready o
                  WHERE o.partition_id = r.partition_id AND o.group_name = ` + group + `)`
	y := own + `
         UNION ALL
         ` + pushes
	switch rows.source {
	case groupRows:
		y = own
	case pushRows:
		y = pushes
	}
	return `(` + y + `) y
        LEFT JOIN LATERAL (SELECT c.* FROM comb_cursors c
            WHERE c.partition_id = y.partition_id AND c.group_name = ` + group + ` OFFSET 0) c ON true
        CROSS JOIN LATERAL (SELECT p.* FROM comb_partitions p WHERE p.id = y.partition_id OFFSET 0) p`
}

// readyRows narrows the ready rows readyCursors reads: their source
// (the group's, the pushes', or both) and a comparison of their partition
// id (SQL to finish "r.partition_id", e.g. "> $3"; "" for any).
type readyRows struct {
	source int
	id     string
}

const (
	bothRows = iota
	groupRows
	pushRows
)

func (r readyRows) idCond() string {
	if r.id == "" {
		return ""
	}
	return ` AND r.partition_id ` + r.id
}

// makeMissingCursors is the pop's CTE "made": it inserts the group's
// cursors that the rows of src (ids in partition_id, where missing) lack.
// A group that starts at the oldest message or at a time gets no cursor
// when it is created, nor when a partition is made after it (but from a
// push that hands it the partition's first message, fresh.go), only when
// a pop first finds messages there: its cost follows the partitions it
// reaches, not the queue's. The rows it inserts are where the missing
// cursor reads (groupAt): committed 0 for a group from the oldest message,
// the first message pushed at or after the time for one from a time
// (from_time, timeStart). The statement that makes them cannot lease
// them (its snapshot does not see them): the pop claims them when it runs
// again (Store.PopReport).
//
// It takes the group's row FOR KEY SHARE, and only while it inserts
// something (the condition on x): a DeleteGroup waits for it, then deletes
// what it made, so no cursor outlives its group. A group deleted first
// gets nothing; so does a group from the end (from_end), whose missing
// cursors are at the end. A seek of the whole group (Store.seekAll)
// sets from_end and from_time under the row's lock FOR UPDATE, and a pop
// that read the group before and waited for that lock reads both again.
func makeMissingCursors(src string) string {
	return `made AS (
    INSERT INTO comb_cursors (partition_id, group_name, queue_id, committed)
    SELECT x.partition_id, g.name, g.queue_id,
           CASE WHEN g.from_time IS NULL THEN 0 ELSE (SELECT ` + timeStart(`g.from_time`) + ` FROM comb_partitions p WHERE p.id = x.partition_id) END
    FROM ` + src + ` x
    CROSS JOIN LATERAL (SELECT g.name, g.queue_id, g.from_time FROM comb_groups g
        WHERE g.queue_id = $1 AND g.name = $2 AND x.missing AND NOT g.from_end FOR KEY SHARE) g
    WHERE x.missing
    ORDER BY x.partition_id
    ON CONFLICT DO NOTHING
    RETURNING partition_id
)`
}

// madeFirst is a condition of every pop's cand that runs made (the
// cursors it makes, makeMissingCursors) to its end before cand locks a
// cursor: an uncorrelated subquery, which PostgreSQL evaluates once, as a
// one-time filter, before it reads a row below it. A pop then takes the
// group's row (FOR KEY SHARE, in made) before its cursors, in the order
// DeleteGroup takes them (the group's row, then its cursors). Left to
// itself, PostgreSQL ran made last, when the statement's final part read
// it, after cand had locked cursors: a pop holding a cursor waited for a
// DeleteGroup that had deleted the group's row, which waited for that
// cursor, and one of the two failed with a deadlock
// (TestDeleteGroupBesidePopsLeavesNoCursor).
const madeFirst = `(SELECT count(*) FROM made) >= 0`

// popOne is the statement of a pop that names its partition: cand claims
// its one cursor, and it reports no other partitions.
func popOne(end string) string {
	return fmt.Sprintf(`
WITH one AS (
    SELECT p.id AS partition_id, NOT EXISTS (
        SELECT 1 FROM comb_cursors c WHERE c.partition_id = p.id AND c.group_name = $2) AS missing
    FROM comb_partitions p WHERE p.id = $3 AND p.next_offset > p.low_offset
      AND NOT EXISTS (SELECT 1 FROM comb_groups g WHERE g.queue_id = $1 AND g.name = $2 AND g.from_end)
), `+makeMissingCursors(`one`)+`, cand AS (
    SELECT c.partition_id, greatest(c.committed, p.low_offset) AS committed, c.delivered_upto,
           r.next_offset, p.name
    FROM comb_cursors c JOIN comb_partitions p ON p.id = c.partition_id
    CROSS JOIN LATERAL (SELECT %s AS next_offset) r
    WHERE %s AND %s AND `+madeFirst+`
    ORDER BY c.leased_at NULLS FIRST, c.partition_id
    LIMIT $4
    FOR UPDATE OF c SKIP LOCKED
)`, end, onePartition, cursorReady(`r.next_offset`)) + popTail(`NULL::text[], 0::bigint`)
}

// popScan is the statement of a pop that reads many cursors (where): ready
// lists the ready ones without locking them, and cand claims the first $4
// of those it can lock, least recently leased first, reading each again
// by key (the claim's recheck sees a cursor another pop leased
// meanwhile).
//
// A scan of the group's ready set (anyPartition) reads it in rotation,
// from after partition id $3 in id order: the group's rows there, then
// the pushes', then both from the first; it stops at $4 + readyReportMax
// ready cursors, so it reads about as many rows as it reports however
// many partitions are ready. (The order of least recently leased first
// needed every ready cursor read: a million partitions with messages in
// 10,000 of them made each pop read 10,000 cursors and partitions, seconds
// a pop on pages not in memory.) $3 is the last partition the group's
// scans on this store leased (Store.scanFrom), so successive pops go round
// the ready partitions. Each part is one scan of the index (queue_id,
// group_name, partition_id), in its order: no sort (TestHotPlansByKey).
// Candidates (somePartitions) are few and read whole, least recently
// leased first.
//
// The ready partitions where the group has no cursor yet come first (never
// leased); the pop makes their cursors (makeMissingCursors) and claims the
// others.
func popScan(end, where string) string {
	pick := func(from, cond, order string) string {
		return fmt.Sprintf(`SELECT p.id AS partition_id, c.leased_at, p.name, c.partition_id IS NULL AS missing
    FROM %s
    CROSS JOIN LATERAL (SELECT %s AS next_offset) r
    WHERE %s AND %s AND %s
    ORDER BY %s
    LIMIT $4 + %d`, from, end, cond, cursorReady(`r.next_offset`), notMissingAtEnd(`$1`, `$2`), order, readyReportMax)
	}
	var ready string
	if where != anyPartition {
		ready = pick(`comb_partitions p LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = $2`,
			where, `c.leased_at NULLS FIRST, p.id`)
	} else {
		var parts []string
		for _, rows := range []readyRows{{groupRows, `> $3`}, {pushRows, `> $3`}, {groupRows, `<= $3`}, {pushRows, `<= $3`}} {
			parts = append(parts, `(`+pick(readyCursors(`$1`, `$2`, rows), `true`, `y.partition_id`)+`)`)
		}
		ready = strings.Join(parts, `
    UNION ALL
    `) + `
    LIMIT $4 + ` + strconv.Itoa(readyReportMax)
	}
	return fmt.Sprintf(`
WITH ready AS MATERIALIZED (
    %[1]s
), `+makeMissingCursors(`ready`)+`, cand AS (
    SELECT c.partition_id, greatest(c.committed, p.low_offset) AS committed, c.delivered_upto,
           r.next_offset, p.name
    FROM ready x JOIN comb_cursors c ON c.partition_id = x.partition_id AND c.group_name = $2
    JOIN comb_partitions p ON p.id = c.partition_id
    CROSS JOIN LATERAL (SELECT %[2]s AS next_offset) r
    WHERE %[3]s AND `+madeFirst+`
    ORDER BY x.leased_at NULLS FIRST, x.partition_id
    LIMIT $4
    FOR UPDATE OF c SKIP LOCKED
)`, ready, end, cursorReady(`r.next_offset`)) + popTail(`(SELECT array_agg(x.name ORDER BY x.leased_at NULLS FIRST, x.partition_id) FROM ready x
        WHERE NOT EXISTS (SELECT 1 FROM upd w WHERE w.partition_id = x.partition_id)),
       (SELECT count(*) FROM ready)`)
}

// popTail leases what cand claimed and reads its segments; report is two
// of the last three columns of every row: the ready partitions not leased,
// and how many were ready. The last is the partitions the pop claimed and
// leased nothing of (its max ran out on the ones before): other pops
// skipped them, locked, while they stayed ready (PopResult.Kept).
func popTail(report string) string {
	return `, alloc AS (
    SELECT cand.*, least(next_offset - committed,
        $5 - coalesce(sum(next_offset - committed) OVER (ORDER BY partition_id
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::bigint AS n
    FROM cand
), upd AS (
    UPDATE comb_cursors c SET
        lease_id    = CASE WHEN $7 THEN NULL ELSE 'l-' || c.partition_id || '-' || $6::text END,
        lease_from  = a.committed,
        lease_upto  = a.committed + a.n - 1,
        lease_until = CASE WHEN $7 THEN NULL ELSE now() + $8::bigint * interval '1 millisecond' END,
        leased_at   = clock_timestamp(),
        attempts    = CASE WHEN $7 THEN 0 WHEN a.committed <= a.delivered_upto THEN c.attempts + 1 ELSE 1 END,
        delivered_upto = greatest(c.delivered_upto, a.committed + a.n - 1),
        committed   = CASE WHEN $7 THEN a.committed + a.n ELSE c.committed END
    FROM alloc a
    WHERE c.partition_id = a.partition_id AND c.group_name = $2 AND a.n > 0
    RETURNING c.partition_id, a.name, a.committed AS lo, a.committed + a.n - 1 AS hi,
              coalesce(c.lease_id, '') AS lease_id,
              CASE WHEN $7 THEN 1 WHEN a.committed <= a.delivered_upto THEN c.attempts ELSE 1 END AS attempts,
              a.delivered_upto
)
(SELECT u.partition_id, u.name, u.lo, u.hi, u.lease_id, u.attempts, u.delivered_upto,
       s.base_offset, s.count, s.created_at, s.payload, s.frame_format,
       ` + report + `,
       (SELECT array_agg(a.name) FROM alloc a WHERE a.n <= 0)
FROM upd u
CROSS JOIN LATERAL (SELECT max(base_offset) AS b0 FROM comb_segments
                    WHERE partition_id = u.partition_id AND base_offset <= u.lo) f
JOIN comb_segments s ON s.partition_id = u.partition_id
                    AND s.base_offset >= coalesce(f.b0, u.lo) AND s.base_offset <= u.hi
ORDER BY u.partition_id, s.base_offset)
UNION ALL
SELECT ` + strconv.Itoa(madeOnly) + `::bigint, ''::text, 0::bigint, -1::bigint, ''::text, 0, -1::bigint,
       0::bigint, 0, now(), ''::bytea, 0::smallint, NULL::text[], 0::bigint, NULL::text[]
WHERE EXISTS (SELECT 1 FROM made) AND NOT EXISTS (SELECT 1 FROM upd)`
}

// madeOnly is the partition id of the one row a pop statement returns
// when it leased nothing and made cursors (makeMissingCursors): the pop
// runs again, and finds them.
const madeOnly = -1

// Pop leases the next messages of a queue for a group. It returns no
// messages and no error when nothing is ready; domain.ErrNotFound when the
// queue does not exist.
//
// A leased pop takes one round trip: it opens the transaction, leases and
// commits (asynchronously, see Options.DurablePops) in one batch. When the
// reply is bounded (MaxBytes) and what it leased does not fit, a second
// statement gives back the rest, in a transaction of its own: a crash
// between the two leaves those messages leased until the lease expires, as
// a reply lost on its way to the consumer would, and they come back then.
// An auto-ack pop settles what it leases, so a give-back left undone by a
// crash would lose messages: it leases and gives back in one transaction,
// which it commits durably, in two round trips when it must give back and
// in one otherwise.
func (s *Store) Pop(ctx context.Context, req domain.PopParams) ([]domain.Message, error) {
	res, err := s.PopReport(ctx, req)
	return res.Messages, err
}

// PopReport is Pop, and also reports the ready partitions the pop saw and
// did not lease (domain.PopResult).
func (s *Store) PopReport(ctx context.Context, req domain.PopParams) (domain.PopResult, error) {
	var none domain.PopResult
	q, err := s.queue(ctx, req.Queue, false)
	if err != nil {
		return none, err
	}
	group := cmp.Or(req.Group, protocol.DefaultGroup)
	if err := s.ensureGroup(ctx, q, group, req.From); err != nil {
		return none, err
	}
	var pid any = int64(0)
	keyed, delayed := req.Partition != "" || len(req.Candidates) > 0, q.Config.DelayMS > 0
	if keyed {
		names := req.Candidates
		if req.Partition != "" {
			names = []string{req.Partition}
		}
		ids, err := s.partitionIDs(ctx, q, names, false)
		if err != nil {
			return none, err
		}
		var some []int64
		for _, n := range names {
			if id := ids[n]; id != 0 && !slices.Contains(some, id) {
				some = append(some, id)
			}
		}
		switch {
		case len(some) == 0:
			return none, nil // nothing was ever pushed there
		case req.Partition != "":
			pid = some[0]
		default:
			pid = some
		}
	}
	maxN := cmp.Or(max(req.Max, 0), protocol.DefaultPopMax)
	parts := cmp.Or(max(req.Partitions, 0), protocol.DefaultPopPartitions)
	leaseMS := req.LeaseMS
	if leaseMS <= 0 {
		leaseMS = q.Config.LeaseMS
	}
	token, err := leaseToken()
	if err != nil {
		return none, err
	}
	scan := !keyed
	if scan {
		// A new group's partitions not yet in the ready set for it go in
		// first (markFor), enough for this pop's and a report's worth.
		if err := s.markFor(ctx, q, group, parts+readyReportMax); err != nil {
			return none, err
		}
		s.mu.Lock()
		pid = s.scanFrom[groupKey{q.ID, group}]
		s.mu.Unlock()
	}
	args := []any{q.ID, group, pid, parts, maxN, token, req.AutoAck, leaseMS}
	sql := popSQL
	switch {
	case req.Partition != "" && delayed:
		sql = popDelayedPartitionSQL
	case req.Partition != "":
		sql = popPartitionSQL
	case keyed && delayed:
		sql = popDelayedCandidatesSQL
	case keyed:
		sql = popCandidatesSQL
	case delayed:
		sql = popDelayedSQL
	}
	if delayed {
		args = append(args, q.Config.DelayMS)
	}
	pool := s.popPool
	if req.AutoAck {
		pool = s.pool
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return none, fmt.Errorf("pop: %w", classify(err))
	}
	// A connection left inside the transaction by an error is destroyed on
	// release (pgxpool keeps only idle ones), which rolls the transaction
	// back.
	defer conn.Release()

	// An auto-ack pop that may have to give back keeps its transaction
	// open for the give-back; every other pop commits in the same batch.
	open := req.AutoAck && req.MaxBytes > 0
	// Every pop statement reads by key: a named partition's cursor, the
	// candidates', or those of the ready set's rows (readyCursors), which a
	// hash join would otherwise read every cursor of the group to match.
	var (
		out    []domain.Message
		pids   []int64
		leases []leasedRange
		rep    readyReport
	)
	// A pop that leased nothing because the group had no cursors yet where
	// messages are runs once more, and finds the cursors it made
	// (makeMissingCursors): once per partition in a group's life.
	for try := 0; try < 2; try++ {
		if try > 0 {
			if open {
				// Nothing leased: what it made commits.
				if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
					return none, fmt.Errorf("pop: %w", classify(err))
				}
			}
			if args[5], err = leaseToken(); err != nil {
				return none, err
			}
		}
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(keyedPlansSQL)
		b.Queue(sql, args...)
		if !open {
			b.Queue("COMMIT")
		}
		br := conn.SendBatch(ctx, b)
		out, pids, leases, rep, err = readPop(br, maxN)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return none, fmt.Errorf("pop: %w", classify(err))
		}
		if !rep.made {
			break
		}
	}
	if scan && len(leases) > 0 {
		// The next scan starts after the last partition this one leased.
		last := leases[0].pid
		for _, l := range leases[1:] {
			last = max(last, l.pid)
		}
		s.mu.Lock()
		s.scanFrom[groupKey{q.ID, group}] = last
		s.mu.Unlock()
	}
	var trim *trimArgs
	if req.MaxBytes > 0 {
		out, trim = trimToFit(req, out, pids, leases)
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.logLeases(ctx, req, leases, trim)
	}
	res := domain.PopResult{Messages: out, Ready: rep.others, Kept: rep.kept,
		ReadyKnown: len(leases) > 0 && rep.ready > 0 && rep.ready < int64(parts+readyReportMax)}
	if trim != nil {
		for _, l := range leases {
			if slices.Contains(trim.pids, l.pid) {
				res.Ready = append(res.Ready, l.name)
				res.Kept = append(res.Kept, l.name)
			}
		}
	}
	if !open && trim == nil {
		return res, nil
	}
	b := &pgx.Batch{}
	if trim != nil {
		b.Queue(trimPopSQL, trim.pids, trim.los, trim.prevs, trim.uptos, req.AutoAck, trim.his, trim.leases, group)
	}
	if open {
		b.Queue("COMMIT")
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if !open {
			// The messages returned are leased and committed: the rest
			// stays leased until its lease expires.
			s.log.Warn("pop: give back what does not fit", "queue", req.Queue, "err", err)
			res.Ready, res.ReadyKnown, res.Kept = rep.others, false, rep.kept
			return res, nil
		}
		return none, fmt.Errorf("pop: commit: %w", classify(err))
	}
	return res, nil
}

// logLeases logs, at debug level, each lease a pop statement took (its
// offsets, and the cursor's delivered_upto before it, from which the
// attempt was counted) and how far a trim cut it back: what a redelivery's
// attempt number is judged against.
func (s *Store) logLeases(ctx context.Context, req domain.PopParams, leases []leasedRange, trim *trimArgs) {
	for _, l := range leases {
		upto := l.hi
		if trim != nil {
			if i := slices.Index(trim.pids, l.pid); i >= 0 {
				upto = trim.uptos[i]
			}
		}
		s.log.DebugContext(ctx, "pop leased", "queue", req.Queue.Name, "group", req.Group, "partition", l.name,
			"partition_id", l.pid, "lease", l.lease, "from", l.lo, "to", l.hi, "returned_to", upto, "delivered_before", l.prev)
	}
}

// readPop reads the pop statement's rows: the messages, the partition id
// of each, the ranges leased, and the report of ready partitions.
func readPop(br pgx.BatchResults, maxN int) ([]domain.Message, []int64, []leasedRange, readyReport, error) {
	var rep readyReport
	if _, err := br.Exec(); err != nil { // BEGIN
		return nil, nil, nil, rep, err
	}
	if _, err := br.Exec(); err != nil { // keyedPlansSQL
		return nil, nil, nil, rep, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, nil, rep, err
	}
	out := make([]domain.Message, 0, maxN)
	pids := make([]int64, 0, maxN)
	var leases []leasedRange
	var (
		partID, lo, hi, delivered, base int64
		count, attempts                 int32
		format                          int16
		name, lease                     string
		created                         time.Time
		payload                         pgtype.DriverBytes
		others, kept                    []string
		ready                           int64
	)
	_, err = pgx.ForEachRow(rows, []any{&partID, &name, &lo, &hi, &lease, &attempts, &delivered,
		&base, &count, &created, &payload, &format, &others, &ready, &kept}, func() error {
		if partID == madeOnly {
			rep.made = true
			return nil
		}
		if len(leases) == 0 {
			rep = readyReport{others: others, ready: ready, kept: kept} // the same on every row
		}
		if n := len(leases); n == 0 || leases[n-1].pid != partID {
			leases = append(leases, leasedRange{pid: partID, name: name, lo: lo, hi: hi, prev: delivered, lease: lease})
		}
		// payload is pgx's read buffer, valid until the next row: copy it
		// once per segment (scanning into a []byte would copy it as well),
		// and let the messages alias the copy.
		rest := append([]byte(nil), payload...)
		for off := base; off < base+int64(count); off++ {
			f, r, err := readFrame(rest, format)
			if err != nil {
				return fmt.Errorf("partition %d segment %d: %w", partID, base, err)
			}
			rest = r
			if off < lo || off > hi {
				continue
			}
			att := 1
			if off <= delivered {
				att = int(attempts)
			}
			out = append(out, domain.Message{
				Partition: name, Offset: off, ID: string(f.id), Lease: lease,
				Attempt: att, CreatedAt: created, Data: f.data, Encoding: f.enc, Headers: f.headers,
			})
			pids = append(pids, partID)
		}
		return nil
	})
	return out, pids, leases, rep, err
}

// leasedRange is what one pop leased of one partition.
type leasedRange struct {
	pid, lo, hi, prev int64 // prev: delivered_upto before the pop
	name, lease       string
}

// readyReport is what a pop statement reports of the ready partitions:
// those it did not lease, and how many were ready in all (0 from a pop
// naming its partition, which reports nothing).
type readyReport struct {
	others []string
	ready  int64
	kept   []string // claimed, and nothing leased (see popTail)
	made   bool     // leased nothing, and made cursors (madeOnly)
}

// trimPopSQL shrinks leases to what a trimmed pop returns ($4 is the last
// offset returned, lo - 1 when none): a lease that returned nothing is
// released with its attempt given back; with auto-ack the cursor goes back
// to just past the last message returned. The guards (our lease id, or an
// auto-ack cursor nobody moved since) leave a cursor alone that another
// consumer took over meanwhile.
const trimPopSQL = `
UPDATE comb_cursors c SET
    lease_upto  = CASE WHEN x.upto < x.lo THEN NULL ELSE x.upto END,
    lease_from  = CASE WHEN x.upto < x.lo THEN NULL ELSE c.lease_from END,
    lease_id    = CASE WHEN x.upto < x.lo THEN NULL ELSE c.lease_id END,
    lease_until = CASE WHEN x.upto < x.lo THEN NULL ELSE c.lease_until END,
    committed   = CASE WHEN $5 THEN x.upto + 1 ELSE c.committed END,
    delivered_upto = greatest(x.prev, x.upto),
    attempts    = CASE WHEN x.upto >= x.lo OR $5 THEN c.attempts
                       WHEN x.lo <= x.prev THEN greatest(c.attempts - 1, 0) ELSE 0 END
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $6::bigint[], $7::text[])
     AS x(pid, lo, prev, upto, hi, lease)
WHERE c.partition_id = x.pid AND c.group_name = $8
  AND CASE WHEN $5 THEN c.committed = x.hi + 1 ELSE c.lease_id = x.lease END`

// trimArgs are the arrays of trimPopSQL: one element per lease to shrink.
type trimArgs struct {
	pids, los, prevs, uptos, his []int64
	leases                       []string
}

// trimToFit keeps the prefix of out that fits req.MaxBytes (at least one
// message, unless req.StrictMaxBytes) and returns what trimPopSQL needs to give back the rest of the
// leases, or nil when everything fits.
func trimToFit(req domain.PopParams, out []domain.Message, pids []int64, leases []leasedRange) ([]domain.Message, *trimArgs) {
	size := req.SizeOf
	if size == nil {
		size = defaultSize
	}
	total, keep := 0, 0
	for keep < len(out) {
		total += size(&out[keep])
		if total > req.MaxBytes && (keep > 0 || req.StrictMaxBytes) {
			break
		}
		keep++
	}
	if keep == len(out) {
		return out, nil
	}
	last := map[int64]int64{} // partition id -> last offset kept
	for _, l := range leases {
		last[l.pid] = l.lo - 1
	}
	for i, m := range out[:keep] {
		last[pids[i]] = m.Offset
	}
	t := &trimArgs{}
	for _, l := range leases {
		if last[l.pid] == l.hi {
			continue
		}
		t.pids, t.los, t.prevs = append(t.pids, l.pid), append(t.los, l.lo), append(t.prevs, l.prev)
		t.uptos, t.his, t.leases = append(t.uptos, last[l.pid]), append(t.his, l.hi), append(t.leases, l.lease)
	}
	return out[:keep], t
}

// defaultSize is a message's size in a reply when PopParams.SizeOf is nil.
func defaultSize(m *domain.Message) int {
	return len(m.Data) + len(m.Headers) + len(m.ID) + len(m.Partition) + 64
}

// leaseToken is the random part of the lease ids of one pop; the id also
// names the partition, so leases are unique and renew finds them by key.
func leaseToken() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lease token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
