package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// Groups returns a queue's consumer groups, ordered by name, with their
// lag: pending and leased as in GroupFigures (the same statement), and
// their dead letters. domain.ErrNotFound when the queue does not exist.
func (s *Store) Groups(ctx context.Context, ref domain.QueueRef) ([]domain.GroupState, error) {
	q, err := s.queue(ctx, ref, false)
	if err != nil {
		return nil, err
	}
	// One snapshot for both reads, so dead letters and pending agree.
	var figs []GroupFigures
	dead := map[string]int64{}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, queueGroupsSQL, q.ID)
		if err != nil {
			return err
		}
		if figs, err = pgx.CollectRows(rows, scanGroupFigures); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT group_name, count(*) FROM comb_dead_letters WHERE queue_id = $1 GROUP BY group_name`, q.ID)
		if err != nil {
			return err
		}
		var g string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&g, &n}, func() error {
			dead[g] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("groups: %w", classify(err))
	}
	out := make([]domain.GroupState, len(figs))
	for i, f := range figs {
		out[i] = domain.GroupState{Name: f.Group, Pending: f.Depth, Leased: f.LeasesActive, Dead: dead[f.Group], OldestPendingAge: f.OldestAge}
	}
	return out, nil
}

// DeleteGroup removes a consumer group of a queue: its row, its cursors
// (and with them its leases) and its dead letters, in one transaction.
// Completed retention then no longer waits for it. domain.ErrNotFound when
// the queue or the group does not exist.
//
// Other stores (bridges) that knew the group find out within their queue
// cache TTL; until then a pop there under the group's name finds no
// cursors and returns nothing, and after it the pop starts the group anew.
func (s *Store) DeleteGroup(ctx context.Context, ref domain.QueueRef, group string) error {
	q, err := s.queue(ctx, ref, false)
	if err != nil {
		return err
	}
	queueGone := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The queue row's lock orders this against group and partition
		// creation (ensureGroup, createPartitions, a push's fresh
		// partitions), and deleting the group row waits for the pops
		// that make its cursors (their FOR KEY SHARE, makeMissingCursors):
		// no cursor of the group is made after its delete. A pop takes
		// the group's row before it locks cursors (madeFirst), as this
		// does, so the two never wait for each other in a circle.
		if err := lockQueue(ctx, tx, q, "FOR UPDATE"); err != nil {
			queueGone = errors.Is(err, domain.ErrNotFound)
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM comb_groups WHERE queue_id = $1 AND name = $2`, q.ID, group)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("group %q of queue %q: %w", group, ref.Name, domain.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM comb_cursors WHERE queue_id = $1 AND group_name = $2`, q.ID, group); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM comb_dead_letters WHERE queue_id = $1 AND group_name = $2`, q.ID, group)
		return err
	})
	s.mu.Lock()
	delete(s.groups, groupKey{q.ID, group})
	delete(s.scanFrom, groupKey{q.ID, group})
	delete(s.marking, groupKey{q.ID, group})
	s.mu.Unlock()
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			if queueGone {
				s.forget(ref)
			}
			return err
		}
		return fmt.Errorf("delete group %q: %w", group, classify(err))
	}
	s.log.Info("deleted group", "queue", ref, "group", group)
	return nil
}
