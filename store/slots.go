package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/combmq/comb/domain"
)

// Segment slots: how retention gives space back without vacuum.
//
// Deleting a segment row leaves a dead heap tuple and, for its payload
// (TOAST, STORAGE EXTERNAL), a few dead TOAST chunks that only vacuum
// reclaims; at tens of thousands of messages a second autovacuum falls
// behind and the database grows without end. So comb_segments is
// partitioned by slot (migration 0007), and space is given back by
// TRUNCATE of a whole child, Kafka's segment deletion in PostgreSQL's
// terms:
//
//   - Slots 0..ringSlots-1 are a ring of hot children, each taking the
//     pushes of one slotSpan of time (the database's clock). Only queues
//     whose retention ends within hotHorizon push there (see hotConfig).
//   - The sweeper retires segments by moving their partition's low_offset
//     past them, where every reader starts; it deletes rows only in the
//     cold slot. A retired segment in a hot slot costs nothing until the
//     slot goes.
//   - A hot slot with no live segment left (none past its partition's
//     low_offset) is truncated: its rows and TOAST go at once. A slot still holding live rows when the ring is
//     about to come back to it (a slow group's backlog) has them moved to
//     the cold child first, so every slot starts its turn empty.
//   - The cold child (slot coldSlot) holds queues that keep messages long
//     or forever and what the ring moved out; its row deletes are rare
//     and autovacuum, tuned in the migration, reclaims them.
//
// TRUNCATE is not MVCC-safe: a transaction whose snapshot predates the
// low_offset updates (or the moves) that retired the slot's last segments
// would find them gone. Every statement that reads segments
// takes its locks on all children when it starts (the queries never name a
// slot), and TRUNCATE waits for those locks, so only a statement that took
// its snapshot before the last delete and had not yet locked the child
// could be fooled. A slot is truncated only after it was seen empty twice,
// slotSettle apart, which leaves such a statement seconds to start, where
// it takes microseconds.
const (
	ringSlots = 12
	slotSpan  = 45 * time.Second
	coldSlot  = -1
	// hotHorizon is the longest retention that goes into the ring: rows
	// deleted by then are gone before the ring returns to their slot
	// (ringSlots-1 spans after its turn began) with two spans to spare.
	hotHorizon = (ringSlots - 4) * slotSpan
	// slotEvery spaces slot maintenance within the sweeper's rounds.
	slotEvery = 5 * time.Second
	// slotSettle is how long a slot must stay empty before its TRUNCATE.
	slotSettle = 4 * time.Second
	// moveStep bounds the segments one move transaction takes.
	moveStep = 500
	// slotLockTimeout bounds the wait for a slot's lock: a move or a
	// truncate that cannot have it at once tries again next round rather
	// than queue pops behind it.
	slotLockTimeout = "200ms"
)

// hotSlotSQL is the slot of a push made now, in the database's clock.
var hotSlotSQL = fmt.Sprintf(`(floor(extract(epoch FROM now()) / %d)::bigint %% %d)::smallint`,
	int(slotSpan/time.Second), ringSlots)

// hotConfig reports whether a queue's segments go into the ring: its
// messages are deleted within hotHorizon of their push, by max_age_s, or
// by completed_retention_s once its groups keep up.
func hotConfig(c domain.QueueConfig) bool {
	h := int64(hotHorizon / time.Second)
	return (c.MaxAgeS > 0 && c.MaxAgeS <= h) || (c.CompletedRetentionS > 0 && c.CompletedRetentionS <= h)
}

// slotTable names the child of slot k.
func slotTable(k int) string {
	if k == coldSlot {
		return "comb_segments_cold"
	}
	return fmt.Sprintf("comb_segments_hot_%02d", k)
}

// SlotStats counts one round of slot maintenance.
type SlotStats struct {
	Moved     int64 // segments moved from a hot slot to the cold one
	Truncated int64 // hot slots truncated
}

// slotState is the sweeper's memory of the slots between rounds.
type slotState struct {
	last       time.Time
	emptySince map[int]time.Time
}

// maintainSlotsIfDue runs slot maintenance when slotEvery has passed since
// the last round.
func (s *Store) maintainSlotsIfDue(ctx context.Context) (SlotStats, error) {
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	if time.Since(s.slots.last) < slotEvery {
		return SlotStats{}, nil
	}
	// The current slot by the formula pushes use, and how far its span
	// has gone.
	var cur int
	var phase float64
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT %s::int, mod(extract(epoch FROM now()), %d)::float8 / %d`,
		hotSlotSQL, int(slotSpan/time.Second), int(slotSpan/time.Second))).Scan(&cur, &phase); err != nil {
		return SlotStats{}, fmt.Errorf("slots: %w", classify(err))
	}
	st, err := s.maintainSlotsLocked(ctx, cur, phase, time.Now())
	s.slots.last = time.Now()
	return st, err
}

// maintainSlotsLocked makes one round over the hot slots given the current
// one and how far (0..1) its span has gone: it truncates the slots that
// have stayed empty for slotSettle, and, in the second half of the
// current span, moves what is still live in the next slot to the cold one.
// It never touches the current slot. s.slotsMu is held.
func (s *Store) maintainSlotsLocked(ctx context.Context, cur int, phase float64, now time.Time) (SlotStats, error) {
	var st SlotStats
	if s.slots.emptySince == nil {
		s.slots.emptySince = map[int]time.Time{}
	}
	// Heap pages per hot child: a child that has none holds nothing to
	// reclaim, and costs no scan.
	sizes := make(map[int]int64, ringSlots)
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname, pg_relation_size(c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'comb_segments'::regclass`)
	if err != nil {
		return st, fmt.Errorf("slots: %w", classify(err))
	}
	var name string
	var size int64
	slotOf := make(map[string]int, ringSlots)
	for k := range ringSlots {
		slotOf[slotTable(k)] = k
	}
	if _, err := pgx.ForEachRow(rows, []any{&name, &size}, func() error {
		if k, ok := slotOf[name]; ok {
			sizes[k] = size
		}
		return nil
	}); err != nil {
		return st, fmt.Errorf("slots: %w", classify(err))
	}
	next := (cur + 1) % ringSlots
	for k := range ringSlots {
		if k == cur || sizes[k] == 0 {
			delete(s.slots.emptySince, k)
			continue
		}
		var live bool
		if err := s.pool.QueryRow(ctx, liveSQL(k)).Scan(&live); err != nil {
			return st, fmt.Errorf("slots: %w", classify(err))
		}
		if live {
			delete(s.slots.emptySince, k)
			if k == next && phase >= 0.5 {
				n, err := s.moveSlot(ctx, k)
				st.Moved += n
				if err != nil {
					return st, err
				}
			}
			continue
		}
		since, seen := s.slots.emptySince[k]
		if !seen {
			s.slots.emptySince[k] = now
			continue
		}
		if now.Sub(since) < slotSettle {
			continue
		}
		done, err := s.truncateSlot(ctx, k)
		if err != nil {
			return st, err
		}
		if done {
			st.Truncated++
			delete(s.slots.emptySince, k)
		}
	}
	return st, nil
}

// moveSlot moves the live segments of hot slot k to the cold slot, a
// bounded transaction at a time, and returns how many it moved. The slot's
// SHARE ROW EXCLUSIVE lock keeps every other writer off it meanwhile (a
// queue's delete; pushes go to the current slot) while pops read on: a
// segment is deleted and inserted in one transaction, so a reader sees it
// in one place or the other, never both or neither. Only live segments
// move; retired ones stay for the truncate.
func (s *Store) moveSlot(ctx context.Context, k int) (int64, error) {
	var moved int64
	for range 20 {
		var n int64
		err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+slotLockTimeout+`'`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `LOCK TABLE `+slotTable(k)+` IN SHARE ROW EXCLUSIVE MODE`); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `
				WITH moved AS (
				    DELETE FROM `+slotTable(k)+` d
				    WHERE (d.partition_id, d.base_offset) IN (
				        SELECT s.partition_id, s.base_offset FROM `+slotTable(k)+` s JOIN comb_partitions p ON p.id = s.partition_id
				        WHERE s.base_offset + s.count > p.low_offset LIMIT $1)
				    RETURNING d.*)
				INSERT INTO `+slotTable(coldSlot)+` (partition_id, base_offset, count, bytes, created_at, payload, frame_format, slot)
				SELECT m.partition_id, m.base_offset, m.count, m.bytes, m.created_at, m.payload, m.frame_format, $2
				FROM moved m`, moveStep, coldSlot)
			n = tag.RowsAffected()
			return err
		})
		if lockTimedOut(err) {
			return moved, nil // busy: the next round tries again
		}
		if err != nil {
			return moved, fmt.Errorf("slots: move slot %d: %w", k, classify(err))
		}
		moved += n
		var live bool
		if err := s.pool.QueryRow(ctx, liveSQL(k)).Scan(&live); err != nil {
			return moved, fmt.Errorf("slots: %w", classify(err))
		}
		if !live {
			break
		}
	}
	if moved > 0 {
		s.log.Info("segments outlived the ring: moved to the cold slot", "slot", k, "segments", moved)
	}
	return moved, nil
}

// truncateSlot truncates hot slot k if it is still empty under its ACCESS
// EXCLUSIVE lock, and reports whether it did.
func (s *Store) truncateSlot(ctx context.Context, k int) (bool, error) {
	var done bool
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+slotLockTimeout+`'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+slotTable(k)+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		var live bool
		if err := tx.QueryRow(ctx, liveSQL(k)).Scan(&live); err != nil || live {
			return err
		}
		if _, err := tx.Exec(ctx, `TRUNCATE `+slotTable(k)); err != nil {
			return err
		}
		done = true
		return nil
	})
	if lockTimedOut(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("slots: truncate slot %d: %w", k, classify(err))
	}
	return done, nil
}

// liveSQL asks whether slot k holds a live segment: one past its
// partition's low offset. A segment below it was retired by the sweeper
// (or its partition is gone) and waits only for the slot's truncate.
func liveSQL(k int) string {
	return `SELECT EXISTS (SELECT 1 FROM ` + slotTable(k) + ` s JOIN comb_partitions p ON p.id = s.partition_id
		WHERE s.base_offset + s.count > p.low_offset)`
}

// lockTimedOut reports lock_timeout's error (55P03, lock_not_available).
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
