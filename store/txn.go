package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// errRetryTxn rolls a transaction back that found a queue deleted under a
// cached partition id; Txn forgets the queue and tries once more.
var errRetryTxn = errors.New("retry the transaction")

// lockCursorsSQL locks the cursors a transaction acks, all at once and in
// the key order of the ack batch statement, so that a transaction spanning
// several queues and groups cannot deadlock with an ack batch.
const lockCursorsSQL = `
	SELECT 1 FROM comb_cursors c
	JOIN unnest($1::bigint[], $2::text[]) AS x(pid, grp) ON c.partition_id = x.pid AND c.group_name = x.grp
	ORDER BY c.partition_id, c.group_name
	FOR UPDATE OF c`

// txnAcks are a transaction's acks of one group on one queue, with the
// indexes of the request's acks they are.
type txnAcks struct {
	q     queueRow
	group string
	idx   []int
	acks  []domain.Ack
	ids   map[string]int64 // partition ids by name; 0 when unknown
}

// Txn settles acks and pushes messages in one PostgreSQL transaction,
// committed durably: all of it or none. An ack that is not under a live
// lease of its group (or names an offset outside it) refuses the whole
// transaction with domain.ErrConflict; an ack of a queue that does not exist
// with domain.ErrNotFound; a push that a queue's limits or sizes refuse with
// that push's error (domain.ErrLimit, domain.ErrTooLarge). Each error names
// the part it is about ("acks[2]: …", "push[0]: …"). Pushes deduplicate by
// producer id as Push does, and create the queues they name (a queue so
// created stays, empty, if the transaction is refused later).
//
// Acks run as in Ack's slow path, one group and queue at a time, after
// every cursor named is locked in key order; the pushes then write as in
// Push, under the partition locks, inside the same transaction.
func (s *Store) Txn(ctx context.Context, p domain.TxnParams) (domain.TxnResult, error) {
	res, err := s.txn(ctx, p)
	if !errors.Is(err, errRetryTxn) {
		return res, err
	}
	// A queue was deleted under a cached partition id: forget it and go
	// once more (the push recreates the queue).
	for _, r := range p.Push {
		s.forget(r.Queue)
	}
	for _, a := range p.Acks {
		s.forget(a.Queue)
	}
	res, err = s.txn(ctx, p)
	if errors.Is(err, errRetryTxn) {
		return domain.TxnResult{}, fmt.Errorf("txn: queues changed during the transaction, retry: %w", domain.ErrConflict)
	}
	return res, err
}

// txn makes one attempt; errRetryTxn asks for another.
func (s *Store) txn(ctx context.Context, p domain.TxnParams) (domain.TxnResult, error) {
	units, err := s.txnAcks(ctx, p.Acks)
	if err != nil {
		return domain.TxnResult{}, err
	}
	var lockPids []int64
	var lockGroups []string
	for _, u := range units {
		for _, id := range u.ids {
			if id != 0 {
				lockPids = append(lockPids, id)
				lockGroups = append(lockGroups, u.group)
			}
		}
	}
	var res domain.TxnResult
	err = s.withRetry(ctx, func() error {
		res = domain.TxnResult{Acks: make([]domain.AckResult, len(p.Acks)), Push: make([][]domain.PushResult, len(p.Push))}
		// A plan is used up by its write (segments, duplicate marks):
		// every attempt makes its own.
		var plan *pushPlan
		if len(p.Push) > 0 {
			var err error
			if plan, err = s.plan(ctx, p.Push, false, false); err != nil {
				return err
			}
			for i := range plan.outs {
				if err := plan.outs[i].Err; err != nil {
					return fmt.Errorf("push[%d]: %w", i, err)
				}
			}
		}
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if len(lockPids) > 0 {
				if _, err := tx.Exec(ctx, lockCursorsSQL, lockPids, lockGroups); err != nil {
					return err
				}
			}
			for _, u := range units {
				out, err := s.ackInOrder(ctx, tx, u.q, u.group, u.acks, u.ids, "")
				if err != nil {
					return err
				}
				for k, r := range out {
					res.Acks[u.idx[k]] = r
				}
			}
			for i, r := range res.Acks {
				if !r.OK {
					return domain.Conflictf("acks[%d]: %s", i, r.Error)
				}
			}
			if plan == nil || len(plan.pids) == 0 {
				return nil
			}
			var err error
			if plan.dedup {
				err = s.writeDedup(ctx, tx, plan)
			} else {
				plan.buildSegments()
				err = s.writeSimple(ctx, tx, plan)
			}
			if err != nil {
				return err
			}
			if len(plan.results()) > 0 {
				return errRetryTxn
			}
			for i := range plan.outs {
				res.Push[i] = plan.outs[i].Results
			}
			return nil
		})
	})
	if err != nil {
		if errors.Is(err, errRetryTxn) || errors.Is(err, domain.ErrConflict) || errors.Is(err, domain.ErrNotFound) ||
			errors.Is(err, domain.ErrLimit) || errors.Is(err, domain.ErrTooLarge) || errors.Is(err, domain.ErrInvalid) {
			return domain.TxnResult{}, err
		}
		return domain.TxnResult{}, fmt.Errorf("txn: %w", classify(err))
	}
	return res, nil
}

// txnAcks groups acks by queue and group, in the order each pair first
// appears, and resolves their queues and partitions.
func (s *Store) txnAcks(ctx context.Context, acks []domain.TxnAck) ([]*txnAcks, error) {
	type key struct {
		queue domain.QueueRef
		group string
	}
	var units []*txnAcks
	byKey := map[key]*txnAcks{}
	names := map[*txnAcks][]string{}
	for i, a := range acks {
		if a.Status > domain.AckDead {
			return nil, domain.Invalidf("acks[%d]: unknown ack status %d", i, a.Status)
		}
		a.Group = cmp.Or(a.Group, protocol.DefaultGroup)
		k := key{a.Queue, a.Group}
		u := byKey[k]
		if u == nil {
			q, err := s.queue(ctx, a.Queue, false)
			if err != nil {
				return nil, fmt.Errorf("acks[%d]: %w", i, err)
			}
			u = &txnAcks{q: q, group: a.Group}
			byKey[k] = u
			units = append(units, u)
		}
		u.idx = append(u.idx, i)
		u.acks = append(u.acks, a.Ack)
		if !slices.Contains(names[u], a.Partition) {
			names[u] = append(names[u], a.Partition)
		}
	}
	for _, u := range units {
		ids, err := s.partitionIDs(ctx, u.q, names[u], false)
		if err != nil {
			return nil, fmt.Errorf("txn: %w", err)
		}
		u.ids = ids
	}
	return units, nil
}
