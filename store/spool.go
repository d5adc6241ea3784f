package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// SpoolBatch is records of one spool file that the drain stores at once:
// File's records Prev+1 through Last, whose pushes are Pushes.
//
// Why a mark per file rather than producer ids: giving each spooled
// message an id (spool:<bridge>:<seq>) and letting dedup drop a replay
// would need every queue to have a dedup window long enough to cover the
// outage and the drain, would replace the ids producers chose (their own
// dedup must still apply), and would hold every replayed id in memory.
// One row per spool file, moved forward in the transaction that stores
// the records, costs one statement per drain batch and holds however long
// the outage lasts.
type SpoolBatch struct {
	Spool  string // the spool directory's id, for ForgetSpoolFiles
	File   string
	Prev   int64
	Last   int64
	Pushes []domain.PushParams
}

// ErrSpoolMarkMoved is PushSpooled's error when the file's mark is not at
// Prev: the records were stored already (or another process drains the
// same file). Nothing was written; read the mark again.
var ErrSpoolMarkMoved = fmt.Errorf("%w: spool mark moved", domain.ErrConflict)

// SpoolMark returns the seq of the last record of spool file file that a
// drain stored, 0 when none.
func (s *Store) SpoolMark(ctx context.Context, file string) (int64, error) {
	var seq int64
	err := s.pool.QueryRow(ctx, `SELECT seq FROM comb_spool_applied WHERE file_id = $1`, file).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("spool mark: %w", classify(err))
	}
	return seq, nil
}

// PushSpooled stores a batch of spooled pushes and moves the file's mark
// from Prev to Last in one transaction: either both happen or neither. The
// queues' max_messages, max_bytes and max_message_bytes do not apply: the
// messages were accepted when they were spooled, and producer-id dedup
// does. It returns an outcome per push like Push; a push refused all the
// same (a tenant's max_queues) is not stored, and the mark moves past it.
func (s *Store) PushSpooled(ctx context.Context, b SpoolBatch) ([]domain.PushOutcome, error) {
	for attempt := 0; ; attempt++ {
		outs, retry, err := s.pushSpooled(ctx, b)
		if err != nil || len(retry) == 0 {
			return outs, err
		}
		// A queue was deleted under a cached partition id: nothing was
		// committed; forget it and go again.
		for _, r := range retry {
			s.forget(b.Pushes[r].Queue)
		}
		if attempt == 1 {
			return nil, fmt.Errorf("push spooled: queues changed during the drain, retry: %w", domain.ErrConflict)
		}
	}
}

var errRetryDrain = errors.New("retry the drain batch")

func (s *Store) pushSpooled(ctx context.Context, b SpoolBatch) ([]domain.PushOutcome, []int, error) {
	if b.Last <= b.Prev {
		return nil, nil, fmt.Errorf("push spooled: records %d..%d: %w", b.Prev+1, b.Last, domain.ErrInvalid)
	}
	p, err := s.plan(ctx, b.Pushes, true, false)
	if err != nil {
		return nil, nil, err
	}
	// A push refused for what it is may be passed over; one that failed
	// for any other reason (PostgreSQL gone again) fails the batch, or the
	// mark would move past it.
	for i := range p.outs {
		if e := p.outs[i].Err; e != nil && !errors.Is(e, domain.ErrLimit) && !errors.Is(e, domain.ErrInvalid) && !errors.Is(e, domain.ErrTooLarge) {
			return nil, nil, fmt.Errorf("push spooled: %w", e)
		}
	}
	var retry []int
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(p.pids) > 0 {
			var err error
			if p.dedup {
				err = s.writeDedup(ctx, tx, p)
			} else {
				p.buildSegments()
				err = s.writeSimple(ctx, tx, p)
			}
			if err != nil {
				return err
			}
		}
		var moved int64
		if b.Prev == 0 {
			tag, err := tx.Exec(ctx, `
				INSERT INTO comb_spool_applied (file_id, spool_id, seq) VALUES ($1, $2, $3)
				ON CONFLICT (file_id) DO NOTHING`, b.File, b.Spool, b.Last)
			if err != nil {
				return err
			}
			moved = tag.RowsAffected()
		} else {
			tag, err := tx.Exec(ctx, `
				UPDATE comb_spool_applied SET seq = $3, applied_at = now()
				WHERE file_id = $1 AND seq = $2`, b.File, b.Prev, b.Last)
			if err != nil {
				return err
			}
			moved = tag.RowsAffected()
		}
		if moved != 1 {
			return ErrSpoolMarkMoved
		}
		if len(p.pids) > 0 {
			if retry = p.results(); len(retry) > 0 {
				return errRetryDrain
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errRetryDrain):
		return nil, retry, nil
	case errors.Is(err, ErrSpoolMarkMoved):
		return nil, nil, err
	case err != nil:
		return nil, nil, fmt.Errorf("push spooled: %w", classify(err))
	}
	for i := range p.outs {
		if p.outs[i].Err == nil && p.outs[i].Results == nil {
			p.outs[i].Results = []domain.PushResult{}
		}
	}
	return p.outs, nil, nil
}

// ForgetSpoolFiles deletes the marks of spool's files other than keep:
// files the spool has deleted once drained. Call it only with the files
// the spool still has, after their deletion is durable.
func (s *Store) ForgetSpoolFiles(ctx context.Context, spool string, keep []string) error {
	if keep == nil {
		keep = []string{}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM comb_spool_applied WHERE spool_id = $1 AND file_id <> ALL($2)`, spool, keep); err != nil {
		return fmt.Errorf("forget spool files: %w", classify(err))
	}
	return nil
}
