package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// sweepSegmentsSQL retires a prefix of at most $5 segments of partition
// $1, from its low offset: those every group completed ($3 is the slowest
// group's committed offset) and older than completed_retention_s ($2), or
// older than max_age_s ($4). It stops at the first segment that must stay,
// so low_offset becomes the first retained offset, and it takes the
// partition row's lock only for the one-row update at the end.
//
// It moves low_created_at along: to the push time of the first segment
// it keeps when it read one, else to that of the last it retired (a
// later segment was pushed no earlier, give or take one push
// transaction's length), and to NULL when the partition retains nothing
// any more. The update re-reads a row a concurrent push changed, so a push
// that lands meanwhile is never taken for an empty partition.
//
// Moving low_offset is the delete every reader sees (they all start at
// it). Segments in the cold slot are deleted too, for vacuum to reclaim;
// segments in a hot slot stay until the slot is truncated whole (slots.go),
// which costs no row delete, no dead TOAST and no WAL for them. Two
// sweepers on one partition are harmless: the update applies only if
// low_offset is still the one the statement started from, and reports
// whether it did.
const sweepSegmentsSQL = `
WITH lo AS (
    SELECT low_offset FROM comb_partitions WHERE id = $1
), s AS (
    SELECT g.base_offset, g.count, g.bytes, g.slot, g.created_at,
           (($2::bigint > 0 AND g.base_offset + g.count <= $3 AND g.created_at < now() - $2 * interval '1 second')
            OR ($4::bigint > 0 AND g.created_at < now() - $4 * interval '1 second')) AS ok
    FROM comb_segments g, lo WHERE g.partition_id = $1 AND g.base_offset >= lo.low_offset
    ORDER BY g.base_offset LIMIT $5
), cut AS (
    SELECT coalesce(min(base_offset) FILTER (WHERE NOT ok), max(base_offset + count)) AS upto FROM s
), gone AS (
    SELECT s.* FROM s, cut WHERE s.base_offset < cut.upto
), upd AS (
    UPDATE comb_partitions p
    SET low_offset = agg.e, retained_bytes = p.retained_bytes - agg.bytes,
        low_created_at = CASE WHEN agg.e >= p.next_offset THEN NULL
                              ELSE coalesce((SELECT s.created_at FROM s, cut WHERE s.base_offset = cut.upto), agg.gone_at) END
    FROM (SELECT max(base_offset + count) AS e, coalesce(sum(bytes), 0)::bigint AS bytes, max(created_at) AS gone_at FROM gone) agg, lo
    WHERE p.id = $1 AND agg.e IS NOT NULL AND p.low_offset = lo.low_offset
    RETURNING p.id
), del AS (
    DELETE FROM comb_segments_cold d USING gone
    WHERE d.partition_id = $1 AND d.slot = -1 AND d.base_offset = gone.base_offset AND gone.slot = -1
      AND EXISTS (SELECT 1 FROM upd)
)
SELECT count(*), coalesce(sum(count), 0)::bigint, coalesce(sum(bytes), 0)::bigint FROM gone
WHERE EXISTS (SELECT 1 FROM upd)`

// sweepStep bounds one statement's work, so no statement holds a lock or
// a snapshot for long.
const sweepStep = 1000

// sweepDedupSQL forgets, in one statement for every queue, at most $1
// sets of producer ids (one per partition per push transaction) older than
// their queue's dedup window (all of them where dedup is off). The first condition lets the BRIN index on created_at
// skip what is younger than the shortest window of any queue; rows of a
// queue with dedup off wait for that too when another queue has it on.
const sweepDedupSQL = `
DELETE FROM comb_dedup_sets WHERE ctid = ANY(ARRAY(
    SELECT d.ctid FROM comb_dedup_sets d JOIN comb_queues q ON q.id = d.queue_id
    WHERE d.created_at < now() - (
            SELECT coalesce(min(w), 0) FROM (SELECT (config->>'dedup_window_s')::bigint AS w FROM comb_queues) x WHERE w > 0
          ) * interval '1 second'
      AND d.created_at < now() - coalesce((q.config->>'dedup_window_s')::bigint, 0) * interval '1 second'
    LIMIT $1))`

// sweepHoldsSQL forgets at most $1 holds whose time has come: they hold
// nothing back any more (a pop looks only at those still ahead).
const sweepHoldsSQL = `
DELETE FROM comb_holds WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM comb_holds WHERE ready_at < now() LIMIT $1))`

// retentionCandidatesSQL lists at most $1 partitions that retention may
// shorten, with their queue's completed_retention_s and max_age_s and the
// slowest group's committed offset (-1 with no group; a group with no
// cursor there yet stands where groupAt says): those whose oldest
// retained segment is older than max_age_s,
// or older than completed_retention_s with every group past its first
// offset. It reads
// each queue's row and, for the queues with retention, only the partitions
// whose low_created_at is old enough, through the index: its cost follows
// the queues and what may be deleted, not the partitions. The partitions
// come from a subquery PostgreSQL cannot pull up (OFFSET 0) whose test of
// the queue's retention is a one-time filter: as a join, a plan made once
// the table was analyzed read every partition of a queue without
// retention to test it (TestRetentionSkipsQueuesWithout). The same test
// in the WHERE clause lets the plan leave such queues out as it reads
// them.
var retentionCandidatesSQL = `
SELECT p.id, x.ret, x.age, m.committed
FROM comb_queues q
CROSS JOIN LATERAL (SELECT coalesce((q.config->>'completed_retention_s')::bigint, 0) AS ret,
                           coalesce((q.config->>'max_age_s')::bigint, 0) AS age) x
CROSS JOIN LATERAL (SELECT p.* FROM comb_partitions p
    WHERE (x.ret > 0 OR x.age > 0) AND p.queue_id = q.id
      AND p.low_created_at < now() - least(nullif(x.ret, 0), nullif(x.age, 0)) * interval '1 second'
    OFFSET 0) p
CROSS JOIN LATERAL (SELECT coalesce(min(` + groupAt + `), -1) AS committed
    FROM comb_groups g LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = g.name
    WHERE g.queue_id = p.queue_id) m
WHERE (x.ret > 0 OR x.age > 0) AND p.next_offset > p.low_offset
  AND ((x.age > 0 AND p.low_created_at < now() - x.age * interval '1 second')
       OR (x.ret > 0 AND m.committed > p.low_offset))
LIMIT $1`

// Sweep makes one bounded pass of retention over every queue: it deletes
// whole segments that completed_retention_s or max_age_s allow, and forgets
// producer ids older than the dedup window and holds whose time has come.
// Several bridges may sweep at once.
//
// An idle database costs one transaction a pass, however many queues and
// partitions it holds: the expiry of ids and holds and the search for
// what retention may delete go in one round trip, and only the
// partitions found get a statement of their own.
func (s *Store) Sweep(ctx context.Context) (SweepStats, error) {
	return s.sweep(ctx, true)
}

// sweep is Sweep; without ready it leaves the ready set alone (RunSweeper
// reads it less often while it holds nothing to do, readyPace).
func (s *Store) sweep(ctx context.Context, ready bool) (SweepStats, error) {
	var st SweepStats
	type cand struct{ pid, ret, age, committed int64 }
	var cands []cand
	b := &pgx.Batch{}
	b.Queue(sweepDedupSQL, sweepStep*10).Exec(func(tag pgconn.CommandTag) error {
		st.DedupSets = tag.RowsAffected()
		return nil
	})
	b.Queue(sweepHoldsSQL, sweepStep*10).Exec(func(tag pgconn.CommandTag) error {
		st.Holds = tag.RowsAffected()
		return nil
	})
	b.Queue(retentionCandidatesSQL, sweepStep*10).Query(func(rows pgx.Rows) error {
		var c cand
		_, err := pgx.ForEachRow(rows, []any{&c.pid, &c.ret, &c.age, &c.committed}, func() error {
			cands = append(cands, c)
			return nil
		})
		return err
	})
	// A window of the ready set, after where the last one ended: a sweep
	// reads the rows of at most readyWindow partitions however many are
	// ready. A push's row (anyGroup) is spread to the groups once its
	// partition is quiet; a group's row is trimmed once its group is
	// caught up there (both on a second look, readySeenAgain).
	var (
		stale, window []readyKey
		spread        []int64
	)
	parts, caughtUp, last := map[int64]bool{}, 0, int64(0)
	from := s.readyFrom.Load()
	readWindow := func(rows pgx.Rows) error {
		var k readyKey
		var next int64
		var caught bool
		s.readyMu.Lock()
		defer s.readyMu.Unlock()
		_, err := pgx.ForEachRow(rows, []any{&k.pid, &k.group, &caught, &next}, func() error {
			parts[k.pid], last = true, max(last, k.pid)
			window = append(window, k)
			switch {
			case k.group == "":
				// A push's row, spread once its partition is quiet; one
				// seen for the first time may be (a burst to spread).
				_, seen := s.readySeen[k]
				if s.readySeenAgain(k, next) {
					spread = append(spread, k.pid)
				} else if !seen {
					caughtUp++
				}
			case !caught:
				delete(s.readySeen, k)
			default:
				caughtUp++
				if s.readySeenAgain(k, next) {
					stale = append(stale, k)
				}
			}
			return nil
		})
		return err
	}
	if ready {
		b.Queue(staleReadySQL, readyWindow, from).Query(readWindow)
	}
	// One implicit transaction: the batch ends in one Sync.
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return st, fmt.Errorf("sweep: %w", classify(err))
	}
	read := len(parts)
	if ready {
		end := last
		if read < readyWindow {
			end, last = math.MaxInt64, 0 // the end of the set: the next window starts over
		}
		s.readyFrom.Store(last)
		s.forgetUnseen(from, end, window)
		// Nothing to spread or trim, now or at the next look: rows of
		// groups short of their partitions' ends, or of partitions pushed
		// to since the last look.
		st.ReadyIdle = caughtUp == 0 && len(spread) == 0 && len(stale) == 0
	}
	// Back at once while windows are mostly rows to trim or spread, now or
	// at the next look (a burst), not through a set of partitions that
	// are simply ready or pushed to all the time.
	st.More = st.DedupSets == sweepStep*10 || st.Holds == sweepStep*10 || len(cands) == sweepStep*10 ||
		(read == readyWindow && caughtUp+len(spread) >= readyWindow/2)
	if len(spread) > 0 {
		var err error
		if st.ReadySpread, err = s.spreadReady(ctx, spread); err != nil {
			return st, err
		}
	}
	if len(stale) > 0 {
		var err error
		if st.Ready, err = s.trimReady(ctx, stale); err != nil {
			return st, err
		}
	}
	if st.Ready+st.ReadySpread > 0 {
		var err error
		if st.ReadyVacuumed, err = s.vacuumReadyIfDue(ctx, st.Ready+st.ReadySpread); err != nil {
			return st, err
		}
	}
	for _, c := range cands {
		var segs, msgs, bytes int64
		if err := s.pool.QueryRow(ctx, sweepSegmentsSQL, c.pid, c.ret, c.committed, c.age, sweepStep).
			Scan(&segs, &msgs, &bytes); err != nil {
			return st, fmt.Errorf("sweep partition %d: %w", c.pid, classify(err))
		}
		st.Segments += segs
		st.Messages += msgs
		st.Bytes += bytes
		st.More = st.More || segs == sweepStep
	}
	var err error
	st.Slots, err = s.maintainSlotsIfDue(ctx)
	return st, err
}

// RunSweeper sweeps every interval until ctx ends, and again at once while
// a sweep reports more to do. Errors are logged, not fatal: retention
// resumes when PostgreSQL answers again. With several brokers on one
// database and schema, one of them leads and sweeps every interval; the
// others skip every round (see sweepLeader), so N brokers cost one
// sweep an interval, not N.
func (s *Store) RunSweeper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lead sweepLeader
	defer lead.resign()
	var pace readyPace
	for {
		// Every broker forgets its own dedup sets past their window,
		// leader or not.
		s.dedup.expire(time.Now())
		withReady := pace.due()
		st, err := s.sweepIfLeader(ctx, &lead, withReady)
		if err == nil && withReady {
			pace.read(st.ReadyIdle)
		}
		switch {
		case errors.Is(err, context.Canceled) || ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("retention sweep failed", "err", err)
		case st.Segments > 0 || st.DedupSets > 0 || st.Ready > 0 || st.ReadySpread > 0 || st.Slots != (SlotStats{}):
			s.log.Debug("retention sweep", "segments", st.Segments, "messages", st.Messages,
				"bytes", st.Bytes, "dedup_sets", st.DedupSets, "ready_trimmed", st.Ready, "ready_spread", st.ReadySpread, "slots_truncated", st.Slots.Truncated,
				"segments_moved", st.Slots.Moved)
		}
		if err == nil && st.More {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweeperLockKey names the sweeper's session advisory lock: one per
// database and schema.
const sweeperLockKey = `hashtextextended('comb_sweeper:' || current_schema(), 0)`

// sweepLeader is a store's hold on the sweeper's lock. The leader keeps
// the lock between rounds, on a connection of its own taken out of the
// pool, so that another store's round never finds it free between two of
// the leader's sweeps: holding it only while sweeping would let every
// store, its ticker out of phase with the others', sweep once an interval.
// When the leader stops, or its session ends (a crash, PostgreSQL
// restarted), the lock is free and another store takes it at its next
// round.
type sweepLeader struct {
	conn *pgx.Conn // holds the lock; nil while another store leads
}

// hold reports whether this store leads: it checks that the session
// holding the lock is still there (a round trip, as the attempt to take
// the lock is), or tries to take the lock.
func (l *sweepLeader) hold(ctx context.Context, s *Store) (bool, error) {
	if l.conn != nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.conn.Ping(pctx)
		cancel()
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		l.resign() // the session, and the lock with it, is gone
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	var leader bool
	if err := pc.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+sweeperLockKey+`)`).Scan(&leader); err != nil {
		pc.Release()
		return false, err
	}
	if !leader {
		pc.Release()
		return false, nil
	}
	// Out of the pool: the pool would hand the session, lock and all, to
	// other work, and may close it when idle. The leader so has one
	// connection more than pg_max_conns.
	l.conn = pc.Hijack()
	return true, nil
}

// resign lets the lock go by closing its session. It is safe to call
// when not leading.
func (l *sweepLeader) resign() {
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.conn.Close(ctx) // the lock ends with the session, even if Close fails
	l.conn = nil
}

// sweepIfLeader sweeps when this store leads the sweepers of its database
// and schema. A round another store leads reports nothing done.
func (s *Store) sweepIfLeader(ctx context.Context, lead *sweepLeader, ready bool) (SweepStats, error) {
	leader, err := lead.hold(ctx, s)
	if err != nil {
		return SweepStats{}, fmt.Errorf("sweep: %w", classify(err))
	}
	if !leader {
		return SweepStats{}, nil
	}
	return s.sweep(ctx, ready)
}

// readyPace is how often RunSweeper reads a window of the ready set. Each
// window costs PostgreSQL the same however little it finds: a group that
// lags on every partition of a big queue has its rows read again, a window
// a sweep, though none can be trimmed (about 0.1 s a second here with
// 200,000 partitions). After a window with nothing to do (ReadyIdle) the
// sweeper skips the next one, after two in a row the next three, and so on
// up to readyPaceMax; a window with work puts it back to every sweep. A
// row spread or trimmed later than it could have been costs nothing but
// its reading: pops read the pushes' rows, and a group's rows until they
// are trimmed (ready.go).
type readyPace struct {
	gap  int // sweeps skipped after the last window, if it had nothing to do
	skip int // of those, the sweeps left to skip
}

const readyPaceMax = 15

func (p *readyPace) due() bool {
	if p.skip > 0 {
		p.skip--
		return false
	}
	return true
}

func (p *readyPace) read(idle bool) {
	if !idle {
		p.gap, p.skip = 0, 0
		return
	}
	p.gap = min(2*p.gap+1, readyPaceMax)
	p.skip = p.gap
}

// Seek moves a group's cursors on a queue — on every partition, or on one
// when Partition is set — to where To says (StartAll: the oldest retained
// message; StartNew: past the newest; StartTime: the first message at or
// after it), ending their leases. It creates the group if needed and
// returns how many cursors moved.
func (s *Store) Seek(ctx context.Context, req domain.SeekParams) (int, error) {
	q, err := s.queue(ctx, req.Queue, false)
	if err != nil {
		return 0, err
	}
	group, partition, to := cmp.Or(req.Group, protocol.DefaultGroup), req.Partition, req.To
	// A group made here starts where the seek puts it.
	if err := s.ensureGroup(ctx, q, group, to); err != nil {
		return 0, err
	}
	start, args := startExpr(to, 4)
	args = append([]any{q.ID, group, partition}, args...)
	// A seek of every partition puts the group where a new one from there
	// starts: every missing cursor where it seeks to (groupAt), and, back
	// to the oldest message or to a time, its partitions marked in the
	// ready set a window at a time by its pops (unmarked_after, markFor);
	// its cost follows the group's cursors (seekAll).
	if partition == "" {
		moved, err := s.seekAll(ctx, q, group, to)
		if err != nil {
			return 0, fmt.Errorf("seek: %w", classify(err))
		}
		return moved, nil
	}
	// A seek of one partition. A seek back makes it ready without a push:
	// it joins the ready set first, in the same transaction (see ready.go).
	const named = ` AND p.name = $3`
	var moved int
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, markReadySQL(start, named), args...); err != nil {
			return err
		}
		// A group that starts at the end has its missing cursors there
		// (from_end, migration 0017). This seek, of one partition, writes
		// them at the end and clears the flag first, so that what follows
		// reads a missing cursor at the oldest retained message, as for
		// any group.
		var fromEnd bool
		err := tx.QueryRow(ctx, `UPDATE comb_groups SET from_end = false WHERE queue_id = $1 AND name = $2 AND from_end RETURNING true`,
			q.ID, group).Scan(&fromEnd)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if fromEnd {
			if _, err := tx.Exec(ctx, placeCursorsSQL(`p.next_offset`, ` AND p.next_offset > p.low_offset`), q.ID, group); err != nil {
				return err
			}
		}
		// The partition gets the group's cursor where the seek puts it, if
		// it has none yet (they are made lazily, makeMissingCursors): a
		// missing one reads where the group's row says (groupAt), which
		// for a group from a time (from_time) is not where this seek puts
		// it. The group's row FOR KEY SHARE first, as a pop that makes
		// cursors takes it: a DeleteGroup waits, and leaves no cursor of
		// the group behind.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM comb_groups WHERE queue_id = $1 AND name = $2 FOR KEY SHARE`, q.ID, group); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, placeCursorsSQL(start, named), args...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, moveCursorsSQL(start, named), args...); err != nil {
			return err
		}
		// The partition, if it exists: the group is there now, with a
		// cursor or without one.
		return tx.QueryRow(ctx, `SELECT count(*) FROM comb_partitions WHERE queue_id = $1 AND name = $2`,
			q.ID, partition).Scan(&moved)
	})
	if err != nil {
		return 0, fmt.Errorf("seek: %w", classify(err))
	}
	return moved, nil
}

// seekAll is Seek of every partition of group, in one transaction:
//   - the group's row FOR UPDATE, which waits for the pushes and pops that
//     hold it FOR KEY SHARE to write cursors (a push writes those of a
//     group from the end, allocOffsetsSQL; a pop the missing ones of any
//     other, makeMissingCursors), and makes those after it read it anew:
//     each reads where the group's missing cursors are as it writes;
//   - the group's row placed where to says (placeGroupSQL, groupPlace),
//     as a new group from there is: its missing cursors there, and, but
//     for a seek to the end, its pops marking every partition in the
//     ready set a window at a time before they read it (markFor), so that
//     the set's invariant holds with no row written here (ready.go);
//   - its cursors moved there, their leases ended.
//
// Its cost follows the group's cursors, not the queue's partitions:
// marking every partition, or writing the missing cursors, took 16-25 s
// at a million. It returns how many partitions the queue has, and records
// here whether the group is marking. Other stores learn of a marking when
// they read the group's row again: when their bridge gets this seek's
// wake-up (Reread), or past their cache's TTL (makeGroup). Until then
// their pops read the set as it was, and find what it lists.
func (s *Store) seekAll(ctx context.Context, q queueRow, group string, to domain.Start) (int, error) {
	fromEnd, unmarked, at := groupPlace(to)
	start, targs := startExpr(to, 3)
	var moved int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM comb_groups WHERE queue_id = $1 AND name = $2 FOR UPDATE`, q.ID, group); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, placeGroupSQL, q.ID, group, fromEnd, unmarked, at); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, moveCursorsSQL(start, ""), append([]any{q.ID, group}, targs...)...); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM comb_partitions WHERE queue_id = $1`, q.ID).Scan(&moved)
	})
	if err != nil {
		return 0, err
	}
	s.seeGroup(groupKey{q.ID, group}, unmarked != nil)
	return moved, nil
}

// moveCursorsSQL moves group $2's cursors on queue $1 to start (an
// expression of their partition p), narrowed by where (SQL of p starting
// with " AND", or ""), and ends their leases. The cursors are locked in
// partition order first, as acks and a push's hand-offs lock them: in the
// order the UPDATE happened to meet them, a seek beside acks deadlocked
// (TestReadySetCoversReadyCursors).
func moveCursorsSQL(start, where string) string {
	return `
		WITH l AS (
		    SELECT c.partition_id FROM comb_cursors c JOIN comb_partitions p ON p.id = c.partition_id
		    WHERE c.queue_id = $1 AND c.group_name = $2` + where + `
		    ORDER BY c.partition_id
		    FOR UPDATE OF c
		)
		UPDATE comb_cursors c SET committed = ` + start + `,
		       lease_id = NULL, lease_until = NULL, lease_from = NULL, lease_upto = NULL,
		       attempts = 0, delivered_upto = -1
		FROM l JOIN comb_partitions p ON p.id = l.partition_id
		WHERE c.partition_id = l.partition_id AND c.group_name = $2`
}

// placeCursorsSQL inserts group $2's cursors on queue $1's partitions
// at start (an expression of p, startExpr), narrowed by where (SQL of p
// starting with " AND"). Existing cursors stay as they are. It reads the
// group's row, so that a group deleted meanwhile gets none.
func placeCursorsSQL(start, where string) string {
	return `
		INSERT INTO comb_cursors (partition_id, group_name, queue_id, committed)
		SELECT p.id, g.name, p.queue_id, ` + start + `
		FROM comb_groups g JOIN comb_partitions p ON p.queue_id = g.queue_id
		WHERE g.queue_id = $1 AND g.name = $2` + where + `
		ORDER BY p.id
		ON CONFLICT DO NOTHING`
}

// timeStart is the SQL for the first offset of partition p pushed at or
// after t (an SQL expression of a time), or p's end: the first segment
// written at or after it, as segments of one partition are written in
// offset order. A partition that retains nothing, or nothing older than t
// (low_created_at, the push time of its oldest retained segment or
// earlier), has it at its oldest retained message, and one that retains
// nothing newer (high_created_at, that of its newest or later, migration
// 0019) at its end, without reading its segments: that read probes every
// slot of comb_segments, and a seek of a million partitions made it twice
// a partition (39 s).
func timeStart(t string) string {
	return `CASE WHEN p.next_offset = p.low_offset OR p.low_created_at >= ` + t + ` THEN p.low_offset
			WHEN p.high_created_at < ` + t + ` THEN p.next_offset
			ELSE greatest(p.low_offset, coalesce((SELECT min(s.base_offset) FROM comb_segments s
			WHERE s.partition_id = p.id AND s.created_at >= ` + t + `), p.next_offset)) END`
}

// startExpr is the SQL for where a cursor on partition p starts, given
// from; its argument, if any, is $argN.
func startExpr(from domain.Start, argN int) (string, []any) {
	switch from.Kind {
	case domain.StartNew:
		return `p.next_offset`, nil
	case domain.StartTime:
		return timeStart(fmt.Sprintf(`$%d`, argN)), []any{from.Time}
	default:
		return `p.low_offset`, nil
	}
}
