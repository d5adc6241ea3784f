package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// Partitions and groups are created on first use. Every (partition, group)
// pair has a cursor row, made when the second of the two appears; both
// creations lock the queue row first, so a partition and a group created at
// the same moment cannot miss each other's cursor. A partition's creator
// takes the lock FOR KEY SHARE and a group's FOR UPDATE, which conflict:
// the later one's statements then see what the earlier committed. Creators
// of partitions do not conflict with each other (they need none of each
// other's rows), so a new queue's first pushes to many partitions do not
// wait in line behind one another.

// partitionIDs maps partition names of queue q to ids, creating the missing
// ones when create is set (else they are left out of the map).
func (s *Store) partitionIDs(ctx context.Context, q queueRow, names []string, create bool) (map[string]int64, error) {
	out := make(map[string]int64, len(names))
	var missing []string
	s.mu.Lock()
	for _, n := range names {
		if id, ok := s.parts[partKey{q.ID, n}]; ok {
			out[n] = id
		} else if _, dup := out[n]; !dup {
			missing = append(missing, n)
			out[n] = 0
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	for _, n := range missing {
		delete(out, n)
	}
	var found map[string]int64
	var err error
	if create {
		// In name order: two pushes (on two brokers, say) creating the
		// same partitions insert their keys in one order, so one waits
		// for the other instead of deadlocking; a deadlock left over
		// (with the cursors of a group created meanwhile) is retried.
		slices.Sort(missing)
		err = s.withRetry(ctx, func() error {
			var err error
			found, err = s.createPartitions(ctx, q, missing)
			return err
		})
	} else {
		found, err = s.lookupPartitions(ctx, q, missing)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	for n, id := range found {
		s.parts[partKey{q.ID, n}] = id
		out[n] = id
	}
	s.mu.Unlock()
	return out, nil
}

func (s *Store) lookupPartitions(ctx context.Context, q queueRow, names []string) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, partitionsByNameSQL, q.ID, names)
	if err != nil {
		return nil, fmt.Errorf("look up partitions: %w", classify(err))
	}
	return collectNameIDs(rows)
}

func collectNameIDs(rows pgx.Rows) (map[string]int64, error) {
	out := map[string]int64{}
	var name string
	var id int64
	_, err := pgx.ForEachRow(rows, []any{&name, &id}, func() error {
		out[name] = id
		return nil
	})
	return out, err
}

// createPartitions creates the missing partitions of q, and returns the
// ids of names. It makes no cursor: a group's is made by its first pop
// that finds messages there (makeMissingCursors). Its transaction,
// BEGIN to COMMIT, goes in one round trip, and it commits without waiting
// for the WAL flush: the push that needs the partitions commits durably
// after it, and flushing that commit flushes this one, which comes before
// it in the WAL. A crash in between loses only partitions no acknowledged
// message is in.
func (s *Store) createPartitions(ctx context.Context, q queueRow, names []string) (map[string]int64, error) {
	conn, err := s.popPool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("create partitions: %w", classify(err))
	}
	// A connection left inside the transaction by an error is destroyed on
	// release, which rolls the transaction back.
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockQueueSQL("FOR KEY SHARE"), q.ID)
	b.Queue(insertPartitionsSQL, q.ID, names)
	// No cursor: a partition is new to every group, which starts at its
	// first message, where a missing cursor is (makeMissingCursors).
	b.Queue(partitionsByNameSQL, q.ID, names)
	b.Queue("COMMIT")
	var out map[string]int64
	gone := false
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil { // BEGIN
			return err
		}
		if tag, err := br.Exec(); err != nil {
			return err
		} else if tag.RowsAffected() == 0 {
			// The insert makes nothing; the rest of the batch runs, and
			// commits nothing.
			gone = true
			return nil
		}
		if _, err := br.Exec(); err != nil { // the partitions
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if out, err = collectNameIDs(rows); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil { // COMMIT
			return err
		}
		return br.Close()
	}()
	if gone {
		s.forget(q.ref())
		return nil, fmt.Errorf("queue %q was deleted: %w", q.Name, domain.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("create partitions: %w", classify(err))
	}
	return out, nil
}

// lockQueueSQL locks queue $1's row in mode ("FOR UPDATE", "FOR KEY
// SHARE").
func lockQueueSQL(mode string) string { return `SELECT 1 FROM comb_queues WHERE id = $1 ` + mode }

const (
	// insertPartitionsSQL creates queue $1's partitions $2 that do not
	// exist (createPartitions), if the queue is still there: no foreign
	// key checks it (migration 0016).
	insertPartitionsSQL = `
		INSERT INTO comb_partitions (queue_id, name)
		SELECT $1, unnest($2::text[]) WHERE EXISTS (SELECT 1 FROM comb_queues WHERE id = $1)
		ON CONFLICT (queue_id, name) DO NOTHING`
	// partitionsByNameSQL reads the ids of queue $1's partitions $2.
	partitionsByNameSQL = `SELECT name, id FROM comb_partitions WHERE queue_id = $1 AND name = ANY($2)`
	// insertGroupSQL creates group $2 of queue $1 unless it exists, placed
	// as groupPlace says ($3-$5); placeGroupSQL places it anew (seekAll).
	insertGroupSQL = `INSERT INTO comb_groups (queue_id, name, from_end, unmarked_after, from_time) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`
	placeGroupSQL  = `UPDATE comb_groups SET from_end = $3, unmarked_after = $4, from_time = $5 WHERE queue_id = $1 AND name = $2`
	// groupMarkingSQL reads whether group $2 of queue $1 has partitions
	// left to mark; no row when it does not exist.
	groupMarkingSQL = `SELECT unmarked_after IS NOT NULL FROM comb_groups WHERE queue_id = $1 AND name = $2`
)

// groupPlace is what a group's row says of a group that starts where
// from says, on every partition where it has no cursor: from_end, at the
// end (migration 0017); from_time, at the first message pushed at or
// after it (migration 0019); neither, at the oldest retained message. A
// group that starts short of the end marks its partitions in the ready
// set a window at a time, from the first by name (unmarked_after set to
// the empty string, migration 0018, markWindowSQL); one from the end is
// behind nowhere (unmarked_after NULL).
func groupPlace(from domain.Start) (fromEnd bool, unmarked *string, at *time.Time) {
	switch from.Kind {
	case domain.StartNew:
		return true, nil, nil
	case domain.StartTime:
		return false, new(string), &from.Time
	default:
		return false, new(string), nil
	}
}

// lockQueue takes the queue row's lock in mode (FOR KEY SHARE or FOR
// UPDATE), which orders partition and group creation, and reports
// domain.ErrNotFound when the queue was deleted meanwhile.
func lockQueue(ctx context.Context, tx pgx.Tx, q queueRow, mode string) error {
	var one int
	err := tx.QueryRow(ctx, lockQueueSQL(mode), q.ID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("queue %q was deleted: %w", q.Name, domain.ErrNotFound)
	}
	return err
}

// ensureGroup makes sure group exists on q, placed on every partition as
// from says, and writes no cursor, however many partitions the queue has:
// its row says where its missing cursors are (groupAt; a pop makes one
// when it first finds messages there, makeMissingCursors). A group from
// the end has them there (comb_groups.from_end, migration 0017), and each
// push writes the cursor of such a group where it stores
// (allocOffsetsSQL); one from a time at the first message pushed at or
// after it (from_time, migration 0019); any other at the oldest retained
// message.
func (s *Store) ensureGroup(ctx context.Context, q queueRow, group string, from domain.Start) error {
	k := groupKey{q.ID, group}
	s.mu.Lock()
	seen, ok := s.groups[k]
	s.mu.Unlock()
	if ok && time.Since(seen) < s.ttl {
		return nil
	}
	// Concurrent first pops of a group (a fresh broker's consumers, all
	// starting at once) make one call between them: each would take the
	// queue row's lock FOR UPDATE in turn, behind the partitions being
	// created (docs/benchmarks.md). A pop that shares another's call
	// starts where that one placed the cursors, as if it had lost the race.
	_, err, _ := s.groupFlight.Do(strconv.FormatInt(q.ID, 10)+"\x00"+group, func() (any, error) {
		return nil, s.makeGroup(ctx, q, group, from, ok)
	})
	return err
}

// makeGroup is ensureGroup's call to PostgreSQL; known says the group was
// seen before, longer ago than the cache's TTL.
func (s *Store) makeGroup(ctx context.Context, q queueRow, group string, from domain.Start, known bool) error {
	k := groupKey{q.ID, group}
	// Past the TTL, look again: another bridge may have deleted the group
	// (DeleteGroup), and then this pop starts it anew. A plain read keeps
	// the common case off the queue row's lock.
	if known {
		var marking bool
		err := s.pool.QueryRow(ctx, groupMarkingSQL, q.ID, group).Scan(&marking)
		if err == nil {
			s.seeGroup(k, marking)
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("check group: %w", classify(err))
		}
	}
	var marking bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockQueue(ctx, tx, q, "FOR UPDATE"); err != nil {
			return err
		}
		fromEnd, unmarked, at := groupPlace(from)
		tag, err := tx.Exec(ctx, insertGroupSQL, q.ID, group, fromEnd, unmarked, at)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			// Exists already: its cursors were made with it.
			return tx.QueryRow(ctx, groupMarkingSQL, q.ID, group).Scan(&marking)
		}
		if fromEnd {
			// It starts at the end, where its missing cursors are
			// (from_end), and the pushes after it write them
			// (allocOffsetsSQL). It starts short of the end nowhere:
			// reading every partition to find none took 0.38 s at
			// 300,000 of them, and its cursors there 5-7 s at a million.
			return nil
		}
		// Where every missing cursor is: the oldest message, or the first
		// pushed at or after the time (from_time). It marks the
		// partitions it is behind on in the ready set one window here, and
		// the rest with its pops (markFor): marking a million here took
		// 7-9 s, and placing a group from a time on each 16 s.
		if _, err := tx.Exec(ctx, keyedPlansSQL); err != nil {
			return err
		}
		err = tx.QueryRow(ctx, markWindowSQL, q.ID, group, s.markWindow).Scan(&marking, new(int))
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return err
	})
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			s.forget(q.ref())
			return err
		}
		return fmt.Errorf("create group: %w", classify(err))
	}
	s.seeGroup(k, marking)
	return nil
}

// seeGroup records that group k exists, and whether its marking is
// unfinished.
func (s *Store) seeGroup(k groupKey, marking bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups[k] = time.Now()
	if marking {
		s.marking[k] = struct{}{}
	} else {
		delete(s.marking, k)
	}
}
