package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
        WHERE p.queue_id = q.id AND p.name = k.part AND ` + cursorReady(`p.next_offset`) + `
          AND ` + notMissingAtEnd(`q.id`, `k.grp`) + `))`

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

// The ready set, comb_ready (migrations 0012 and 0014), lists the
// partitions in which a group may have messages to pop: a row (partition,
// group) for that group, a row (partition, anyGroup) for any. A pop that
// names no partition (popSQL) and the safety check of parked long polls
// (groupMayPop) read their group's rows and the anyGroup rows of a queue
// there (readyCursors) instead of every cursor of the group, and a group
// that stopped popping does not make them read the partitions it lags on.
// Its invariant, pinned by TestReadySetCoversReadyCursors: at every
// commit, each group's cursor short of its partition's next_offset has
// its row or the partition's anyGroup row, or the group's marking has not
// reached the partition yet (a new group that starts at the oldest
// message, comb_groups.unmarked_after, markWindowSQL: its pops mark
// before they read the set); a group's missing cursor
// (makeMissingCursors) counts as one at the oldest retained message, or
// at the end for a group that starts there (groupAt, migration 0017).
// Only three things put a cursor short of its end, and each writes a row
// in its own transaction:
//   - a push (allocOffsetsSQL), the anyGroup row, under the partition
//     row's lock it holds (it reads no group but those that start at the
//     end, whose cursors it writes where it starts); for a partition
//     the push makes (insertFreshSQL), only if the queue has a group,
//     read under the queue row's lock FOR KEY SHARE, which a new group
//     waits for: a queue with no group has no cursor to cover;
//   - a new group that starts short of the end (makeGroup), its
//     marking, which covers every partition until its windows put them
//     in the set;
//   - a seek of one partition (Seek), its group's row; one of every
//     partition but to the end (seekAll), its marking anew, as a new
//     group's.
//
// Everything else only moves cursors forward. The sweeper alone deletes
// rows: it spreads each anyGroup row into the rows of the groups short of
// the partition's end (spreadReady) and deletes the rows of groups caught
// up (trimReady). Each writer takes the rows in (partition id, group)
// order, so that two of them never wait on each other in a cycle.

// anyGroup is the group name of a ready row that stands for every group
// of its partition's queue: a push's. No group has this name (an empty
// group is protocol.DefaultGroup).
const anyGroup = `''`

// markReadySQL upserts group $2's ready rows of queue $1's partitions
// whose end is past start (an expression of p, startExpr), narrowed by
// where (SQL starting with " AND", or ""). On a row that exists it updates it
// to what it was: the update takes the row's lock, so it waits for a trim
// that holds it and then inserts the row anew (trimReady), where DO
// NOTHING would not wait.
func markReadySQL(start, where string) string {
	return `
		INSERT INTO comb_ready (partition_id, group_name, queue_id)
		SELECT p.id, $2, p.queue_id FROM comb_partitions p
		WHERE p.queue_id = $1 AND $2::text <> ` + anyGroup + ` AND p.next_offset > ` + start + where + `
		ORDER BY p.id
		ON CONFLICT (partition_id, group_name) DO UPDATE SET queue_id = EXCLUDED.queue_id`
}

// markWindowSize is how many partitions, in name order, one step of a
// group's marking reads (markWindowSQL): about 30 ms of PostgreSQL's time
// when each retains messages.
const markWindowSize = 5000

// markWindowSQL is one step of the marking of group $2 of queue $1, a
// group made or sought to the oldest message (migration 0018) or to a
// time (from_time, migration 0019): the next $3 partitions by name after
// its unmarked_after, in one transaction, put in the ready set for it
// where they retain messages past where its missing cursor stands (where
// it was placed, as its cursors, if it has any, were: groupAt), and
// unmarked_after moved past them,
// NULL when they were the last. It returns whether partitions are left
// and how many of the window it put in the set, and no row when the
// group's marking was done (or the group is gone).
// The rows go in partition id order, as every writer of the set takes
// them. The mark moves only from where the window was read (a.after):
// two steps at once mark the same window, and the later one leaves the
// mark where the first moved it; a step beside a seek back to the start
// (seekAll, which sets the mark to the empty string) leaves it there,
// where it would move it past partitions the seek needs marked again,
// and one beside a seek to the end (which ends the marking) does not
// start it again. Such a step returns no row, as if the marking were
// done, and its caller reads the group's row again (markFor). A
// partition made or pushed to after the group has a push's row anyway.
var markWindowSQL = `
WITH a AS (
    SELECT unmarked_after AS after, from_time FROM comb_groups WHERE queue_id = $1 AND name = $2
), w AS (
    SELECT p.id, p.queue_id, p.name,
           p.next_offset > CASE WHEN (SELECT from_time FROM a) IS NULL THEN p.low_offset
                                ELSE ` + timeStart(`(SELECT from_time FROM a)`) + ` END AS behind
    FROM comb_partitions p
    WHERE p.queue_id = $1 AND p.name > (SELECT after FROM a)
    ORDER BY p.name LIMIT $3
), i AS (
    INSERT INTO comb_ready (partition_id, group_name, queue_id)
    SELECT id, $2, queue_id FROM w WHERE behind ORDER BY id
    ON CONFLICT (partition_id, group_name) DO UPDATE SET queue_id = EXCLUDED.queue_id
    RETURNING 1
)
UPDATE comb_groups g
SET unmarked_after = CASE WHEN (SELECT count(*) FROM w) < $3 THEN NULL ELSE (SELECT max(w.name) FROM w) END
WHERE g.queue_id = $1 AND g.name = $2 AND g.unmarked_after = (SELECT after FROM a)
RETURNING g.unmarked_after IS NOT NULL, (SELECT count(*) FROM i)`

// markFor marks group's partitions (markWindowSQL) until at least want of
// them were found behind or none is left, if this store knows the group's
// marking unfinished: a pop that reads the ready set calls it first.
// Concurrent pops of the group on this store share one call.
func (s *Store) markFor(ctx context.Context, q queueRow, group string, want int) error {
	k := groupKey{q.ID, group}
	s.mu.Lock()
	_, marking := s.marking[k]
	s.mu.Unlock()
	if !marking {
		return nil
	}
	_, err, _ := s.markFlight.Do(strconv.FormatInt(q.ID, 10)+"\x00"+group, func() (any, error) {
		for found := 0; found < want; {
			// By key (keyedPlansSQL): the window's partitions in the name
			// index's order, where a plan made on stale statistics read
			// and sorted all of the queue's (1 s at a million).
			var more, moved bool
			var n int
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				b := &pgx.Batch{}
				b.Queue(keyedPlansSQL)
				b.Queue(markWindowSQL, q.ID, group, s.markWindow).QueryRow(func(row pgx.Row) error {
					err := row.Scan(&more, &n)
					if errors.Is(err, pgx.ErrNoRows) {
						return nil
					}
					moved = err == nil
					return err
				})
				return tx.SendBatch(ctx, b).Close()
			})
			if err == nil && !moved {
				// No row: done, gone, or the mark moved meanwhile (by
				// another step, or back to the start by a seek): the
				// group's row says which.
				err = s.pool.QueryRow(ctx, groupMarkingSQL, q.ID, group).Scan(&more)
				if errors.Is(err, pgx.ErrNoRows) {
					more, err = false, nil
				}
			}
			if err != nil {
				return nil, fmt.Errorf("mark ready: %w", classify(err))
			}
			if !more {
				s.mu.Lock()
				delete(s.marking, k)
				s.mu.Unlock()
				return nil, nil
			}
			found += n
		}
		return nil, nil
	})
	return err
}

// caughtUp is the condition of a ready row r of a group, on partition p,
// that the group cannot pop there until a push, a seek or its making
// writes a row again: its cursor is at p's end, or the group is gone. A
// group with no cursor there (they are made lazily, see
// makeMissingCursors) is where groupAt says.
var caughtUp = `NOT EXISTS (
        SELECT 1 FROM comb_groups g
        LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = g.name
        WHERE g.queue_id = p.queue_id AND g.name = r.group_name
          AND ` + groupAt + ` < p.next_offset)`

// staleReadySQL reads the ready rows of a window of at most $1
// partitions, in partition id order after $2: of each, its group (anyGroup
// for a push's row, which the sweeper spreads), whether that group is
// caught up there, and the partition's end (readySeenAgain, then
// trimReady). It runs in the sweep's batch, so that a quiet ready set
// costs no transaction of its own, and its windows go round the set, so
// that a sweep's cost is bounded however many partitions are ready.
var staleReadySQL = `
SELECT r.partition_id, r.group_name, r.group_name <> ` + anyGroup + ` AND ` + caughtUp + `, p.next_offset
FROM (SELECT DISTINCT r.partition_id FROM comb_ready r WHERE r.partition_id > $2
      ORDER BY r.partition_id LIMIT $1) w
JOIN comb_ready r ON r.partition_id = w.partition_id
JOIN comb_partitions p ON p.id = r.partition_id`

// readyKey is a ready row: a partition and a group.
type readyKey struct {
	pid   int64
	group string
}

func compareReadyKeys(a, b readyKey) int {
	return cmp.Or(cmp.Compare(a.pid, b.pid), strings.Compare(a.group, b.group))
}

// readySeenAgain says whether the sweeper may trim row k, caught up at
// next, or spread it (a push's row): only on a second look that finds it
// so at the same end, with no push between the two (a round of windows
// apart, a sweep interval when the set fits one window). A partition that
// takes pushes all the time would otherwise lose its row on every sweep
// and have the next push insert it again, and the trim's or the spread's
// lock on the partition row would hold that push up: at 1,000
// one-message pushes a second, the push round trip grew by up to 0.3 ms
// (docs/benchmarks.md, "A ready set in PostgreSQL"). Such a partition
// keeps its push's row, which every group's pops read; it is ready for
// them all anyway. Past readySeenMax rows remembered it trims and spreads
// at the first look. readyMu is held.
func (s *Store) readySeenAgain(k readyKey, next int64) bool {
	if v, ok := s.readySeen[k]; ok && v == next {
		delete(s.readySeen, k)
		return true
	}
	if len(s.readySeen) >= readySeenMax {
		return true
	}
	if s.readySeen == nil {
		s.readySeen = map[readyKey]int64{}
	}
	s.readySeen[k] = next
	return false
}

// forgetUnseen forgets the rows the sweeper remembered in the partition
// range (from, end] of a window that no longer has them (window: the rows
// it read, which it sorts): a queue's or a group's delete took them along.
func (s *Store) forgetUnseen(from, end int64, window []readyKey) {
	slices.SortFunc(window, compareReadyKeys) // the join may not keep the window's order
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	for k := range s.readySeen {
		if k.pid > from && k.pid <= end {
			if _, ok := slices.BinarySearchFunc(window, k, compareReadyKeys); !ok {
				delete(s.readySeen, k)
			}
		}
	}
}

// readySeenMax bounds the rows the sweeper remembers between its two
// looks (about 60 bytes each).
const readySeenMax = 200000

// readyWindow is the most partitions one sweep reads the rows of.
var readyWindow = 10000

// The trim's two statements. The first locks the rows and their
// partitions, skipping what another transaction holds (a push holds its
// partitions' rows, a seek or a new group their ready rows): it never
// waits, and what it skips stays, which only costs a pop a look at a
// cursor that has nothing. The second, with a snapshot taken after those
// locks, deletes the rows whose groups are still caught up: every push,
// seek and new group that wrote them before has committed, and every one
// after waits for the locks and then inserts them anew.
//
// One statement could not do both: READ COMMITTED re-checks a locked row
// that changed against its newest version, but not the NOT EXISTS of
// caughtUp, which it turns into an anti-join whose other side it does not
// read again (TestReadySetCoversReadyCursors failed that way).
var (
	lockStaleReadySQL = `
SELECT r.partition_id, r.group_name FROM comb_ready r JOIN comb_partitions p ON p.id = r.partition_id
WHERE (r.partition_id, r.group_name) IN (SELECT * FROM unnest($1::bigint[], $2::text[]))
ORDER BY r.partition_id, r.group_name
FOR UPDATE OF r SKIP LOCKED FOR SHARE OF p SKIP LOCKED`
	deleteStaleReadySQL = `
DELETE FROM comb_ready r USING comb_partitions p
WHERE (r.partition_id, r.group_name) IN (SELECT * FROM unnest($1::bigint[], $2::text[]))
  AND p.id = r.partition_id AND ` + caughtUp
)

// trimReady deletes the ready rows keys whose groups are caught up
// (staleReadySQL found them), and returns how many it deleted.
func (s *Store) trimReady(ctx context.Context, keys []readyKey) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		pids, groups := make([]int64, len(keys)), make([]string, len(keys))
		for i, k := range keys {
			pids[i], groups[i] = k.pid, k.group
		}
		rows, err := tx.Query(ctx, lockStaleReadySQL, pids, groups)
		if err != nil {
			return err
		}
		var k readyKey
		pids, groups = pids[:0], groups[:0]
		if _, err := pgx.ForEachRow(rows, []any{&k.pid, &k.group}, func() error {
			pids, groups = append(pids, k.pid), append(groups, k.group)
			return nil
		}); err != nil || len(pids) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, deleteStaleReadySQL, pids, groups)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("trim ready set: %w", classify(err))
	}
	return n, nil
}

// The spread's statements, in one transaction. The first takes the
// queues' rows FOR KEY SHARE: a new group (makeGroup) and a group's
// delete hold them FOR UPDATE, so the spread waits for one that is under
// way, and one that comes after waits for the spread; the statements
// after see every group that exists, and a group made after the spread
// writes its own rows from a snapshot that sees the pushes spread. The
// second locks the anyGroup rows and their partitions, skipping what
// another transaction holds (a push holds its partitions' rows), as the
// trim does. The third, with a snapshot taken after those locks, writes
// the rows of the groups short of each partition's end, and the last
// deletes the anyGroup rows it spread.
var (
	lockSpreadQueuesSQL = `
SELECT q.id FROM comb_queues q
WHERE q.id IN (SELECT r.queue_id FROM comb_ready r WHERE r.partition_id = ANY($1) AND r.group_name = ` + anyGroup + `)
ORDER BY q.id
FOR KEY SHARE`
	lockSpreadSQL = `
SELECT r.partition_id FROM comb_ready r JOIN comb_partitions p ON p.id = r.partition_id
WHERE r.partition_id = ANY($1) AND r.group_name = ` + anyGroup + `
ORDER BY r.partition_id
FOR UPDATE OF r SKIP LOCKED FOR SHARE OF p SKIP LOCKED`
	spreadReadySQL = `
INSERT INTO comb_ready (partition_id, group_name, queue_id)
SELECT p.id, g.name, p.queue_id
FROM comb_partitions p JOIN comb_groups g ON g.queue_id = p.queue_id
LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = g.name
WHERE p.id = ANY($1) AND ` + groupAt + ` < p.next_offset
ORDER BY p.id, g.name
ON CONFLICT (partition_id, group_name) DO NOTHING`
	deleteSpreadSQL = `DELETE FROM comb_ready WHERE partition_id = ANY($1) AND group_name = ` + anyGroup
)

// spreadReady replaces the anyGroup rows of pids with the rows of the
// groups short of each partition's end, and returns how many anyGroup
// rows it deleted.
func (s *Store) spreadReady(ctx context.Context, pids []int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockSpreadQueuesSQL, pids); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, lockSpreadSQL, pids)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(locked) == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, spreadReadySQL, locked); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, deleteSpreadSQL, locked)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("spread ready set: %w", classify(err))
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
