package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// anyReadySQL answers, for each check ($1..$4: tenants, queues, groups,
// partitions, "" for any), whether its group may have messages to pop, in
// the named partition or in any (groupMayPop, cursorReady: holds and
// queue delays left out). A queue that does not exist says yes too: a pop
// there answers 404. The queue comes by name, so it costs no lookup of
// its id.
var anyReadySQL = `
SELECT k.i
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS k(tenant, queue, grp, part, i)
LEFT JOIN comb_queues q ON q.tenant = k.tenant AND q.name = k.queue
WHERE q.id IS NULL
   OR (k.part = '' AND ` + groupMayPop(`q.id`, `k.grp`) + `)
   OR (k.part <> '' AND EXISTS (
        SELECT 1 FROM comb_partitions p LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = k.grp
        WHERE p.queue_id = q.id AND p.name = k.part AND ` + cursorReady(`p.next_offset`) + `))`

// AnyReady reports, for each check, whether a pop of it may find messages
// now (see anyReadySQL): the safety net of parked long polls, one
// statement for all of them, however many queues they wait on.
func (s *Store) AnyReady(ctx context.Context, checks []domain.ReadyCheck) ([]bool, error) {
	out := make([]bool, len(checks))
	if len(checks) == 0 {
		return out, nil
	}
	tenants, queues, groups, parts := make([]string, len(checks)), make([]string, len(checks)), make([]string, len(checks)), make([]string, len(checks))
	for i, c := range checks {
		tenants[i], queues[i], groups[i], parts[i] = c.Queue.Tenant, c.Queue.Name, c.Group, c.Partition
	}
	// By key, as a pop reads (keyedPlansSQL): the ready set's rows, then
	// each one's cursor of the group.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(keyedPlansSQL)
	var i int64
	b.Queue(anyReadySQL, tenants, queues, groups, parts).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&i}, func() error {
			out[i-1] = true
			return nil
		})
		return err
	})
	b.Queue("COMMIT")
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("ready: %w", classify(err))
	}
	return out, nil
}

// The ready set, comb_ready (migration 0012), lists the partitions in
// which some group may have messages to pop; a pop that names no
// partition (popSQL) and the safety check of parked long polls
// (groupMayPop) read a queue's rows there instead of every cursor of the
// group. Its invariant, pinned by TestReadySetCoversReadyCursors: at every
// commit, each partition with a cursor short of its next_offset has a row;
// a group's missing cursor (makeMissingCursors) counts as one at offset 0.
// Only three things put a cursor short of its end, and each writes the row
// in its own transaction:
//   - a push (allocOffsetsSQL), under the partition row's lock it holds;
//   - a new group that starts short of the end (makeGroup);
//   - a seek (Seek).
//
// Everything else only moves cursors forward. The sweeper alone deletes
// rows (trimReady). Each writer takes the rows in partition id order, so
// that two of them never wait on each other in a cycle.

// markReadySQL upserts the ready rows of queue $1's partitions whose end
// is past start (an expression of p, startExpr), narrowed by where (SQL
// starting with " AND", or ""). On a row that exists it updates it to
// what it was: the update takes the row's lock, so it waits for a trim
// that holds it and then inserts the row anew (trimReady), where DO
// NOTHING would not wait. $2 is the group, so that its parameter has a
// type in every caller.
func markReadySQL(start, where string) string {
	return `
		INSERT INTO comb_ready (partition_id, queue_id)
		SELECT p.id, p.queue_id FROM comb_partitions p
		WHERE p.queue_id = $1 AND $2::text <> '' AND p.next_offset > ` + start + where + `
		ORDER BY p.id
		ON CONFLICT (partition_id) DO UPDATE SET queue_id = EXCLUDED.queue_id`
}

// caughtUp is the condition of a partition p whose every cursor is at its
// end: no group can pop there until a push, a new group or a seek writes
// its ready row again. A group with no cursor there (they are made
// lazily, see makeMissingCursors) is at the oldest retained message, so a
// partition that retains messages is caught up only when every group of
// its queue has a cursor.
const caughtUp = `NOT EXISTS (
        SELECT 1 FROM comb_cursors c
        WHERE c.partition_id = p.id AND greatest(c.committed, p.low_offset) < p.next_offset)
    AND (p.low_offset >= p.next_offset OR NOT ` + groupWithoutCursor + `)`

// groupWithoutCursor is the condition that some group of partition p's
// queue has no cursor on p yet (cursors are made lazily,
// makeMissingCursors): that group is at p's oldest retained message.
const groupWithoutCursor = `EXISTS (
        SELECT 1 FROM comb_groups g WHERE g.queue_id = p.queue_id AND NOT EXISTS (
            SELECT 1 FROM comb_cursors o WHERE o.partition_id = p.id AND o.group_name = g.name))`

// staleReadySQL reads a window of at most $1 ready rows, in partition id
// order after $2, and says of each whether its partition is caught up,
// and at which end (readySeenAgain, then trimReady). It runs in the
// sweep's batch, so that a quiet ready set costs no transaction of its
// own, and its windows go round the set, so that a sweep's cost is
// bounded however many partitions are ready.
const staleReadySQL = `
SELECT w.partition_id, ` + caughtUp + `, p.next_offset
FROM (SELECT r.partition_id FROM comb_ready r WHERE r.partition_id > $2
      ORDER BY r.partition_id LIMIT $1) w
JOIN comb_partitions p ON p.id = w.partition_id`

// readySeenAgain says whether the sweeper may trim partition pid, caught
// up at next: only on a second look that finds it caught up at the same
// end, with no push between the two (a round of windows apart, a sweep
// interval when the set fits one window). A partition that takes pushes
// all the time, and whose consumers keep up, would otherwise lose its row
// on every sweep and have the next push insert it again, and the trim's
// lock on the partition row would hold that push up: at 1,000 one-message
// pushes a second, the push round trip grew by up to 0.3 ms
// (docs/benchmarks.md, "A ready set in PostgreSQL"). Past readySeenMax
// partitions remembered it trims at the first look. readyMu is held.
func (s *Store) readySeenAgain(pid, next int64) bool {
	if v, ok := s.readySeen[pid]; ok && v == next {
		delete(s.readySeen, pid)
		return true
	}
	if len(s.readySeen) >= readySeenMax {
		return true
	}
	if s.readySeen == nil {
		s.readySeen = map[int64]int64{}
	}
	s.readySeen[pid] = next
	return false
}

// forgetUnseen forgets the partitions the sweeper remembered in the range
// (from, end] of a window that no longer has their rows (window: the ids
// it read, which it sorts): a queue's delete took them along.
func (s *Store) forgetUnseen(from, end int64, window []int64) {
	slices.Sort(window) // the join may not keep the window's order
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	for pid := range s.readySeen {
		if pid > from && pid <= end {
			if _, ok := slices.BinarySearch(window, pid); !ok {
				delete(s.readySeen, pid)
			}
		}
	}
}

// readySeenMax bounds the partitions the sweeper remembers between its two
// looks (about 40 bytes each).
const readySeenMax = 200000

// readyWindow is the most ready rows one sweep reads.
var readyWindow = 10000

// The trim's two statements. The first locks the rows and their
// partitions, skipping what another transaction holds (a push holds its
// partitions' rows, a seek or a new group their ready rows): it never
// waits, and what it skips stays, which only costs a pop a look at a
// cursor that has nothing. The second, with a snapshot taken after those
// locks, deletes the rows whose partitions are still caught up: every
// push, seek and new group that wrote them before has committed, and
// every one after waits for the locks and then inserts them anew.
//
// One statement could not do both: READ COMMITTED re-checks a locked row
// that changed against its newest version, but not the NOT EXISTS of
// caughtUp, which it turns into an anti-join whose other side it does not
// read again (TestReadySetCoversReadyCursors failed that way).
const (
	lockStaleReadySQL = `
SELECT r.partition_id FROM comb_ready r JOIN comb_partitions p ON p.id = r.partition_id
WHERE r.partition_id = ANY($1)
ORDER BY r.partition_id
FOR UPDATE OF r SKIP LOCKED FOR SHARE OF p SKIP LOCKED`
	deleteStaleReadySQL = `
DELETE FROM comb_ready r USING comb_partitions p
WHERE r.partition_id = ANY($1) AND p.id = r.partition_id AND ` + caughtUp
)

// trimReady deletes the ready rows of pids whose partitions are caught
// up (staleReadySQL found them), and returns how many it deleted.
func (s *Store) trimReady(ctx context.Context, pids []int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockStaleReadySQL, pids)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(locked) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, deleteStaleReadySQL, locked)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("trim ready set: %w", classify(err))
	}
	return n, nil
}

// readyVacuumAt is how many trimmed ready rows make the sweeper vacuum
// the set itself. Every trimmed row leaves a dead tuple and a dead entry
// in comb_ready_queue, and a pop's scan of the set by that index visits
// each dead entry's tuple until vacuum removes it. Autovacuum looks at
// most once a minute (autovacuum_naptime): in the scale run, right after
// a million partitions were created and their rows trimmed, the scan of
// 10,000 ready rows took 3 s, against 0.2 s once vacuumed
// (docs/benchmarks.md, "A ready set in PostgreSQL").
var readyVacuumAt int64 = 10000

// vacuumReadyIfDue adds trimmed to the rows trimmed since the set was
// last vacuumed, and vacuums it when they reach readyVacuumAt. VACUUM
// takes no lock that pushes or pops wait for; it cannot run in a
// transaction, so it goes alone, by the simple protocol.
func (s *Store) vacuumReadyIfDue(ctx context.Context, trimmed int64) (bool, error) {
	if s.readyTrimmed.Add(trimmed) < readyVacuumAt {
		return false, nil
	}
	s.readyTrimmed.Store(0)
	if _, err := s.pool.Exec(ctx, `VACUUM comb_ready`, pgx.QueryExecModeSimpleProtocol); err != nil {
		return false, fmt.Errorf("vacuum ready set: %w", classify(err))
	}
	return true, nil
}
