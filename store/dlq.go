package store

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

func parseDLQID(s string) (int64, error) {
	num, ok := strings.CutPrefix(s, "d-")
	id, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: %q is not a dead-letter id (d-<number>)", domain.ErrInvalid, s)
	}
	return id, nil
}

func parseDLQIDs(ss []string) ([]int64, error) {
	out := make([]int64, len(ss))
	for i, s := range ss {
		id, err := parseDLQID(s)
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	return out, nil
}

// DeadLetters lists a queue's dead letters, oldest first, and the cursor of
// the next page ("" at the end).
func (s *Store) DeadLetters(ctx context.Context, dq domain.DLQParams) ([]domain.DeadLetter, string, error) {
	q, err := s.queue(ctx, dq.Queue, false)
	if err != nil {
		return nil, "", err
	}
	limit := cmp.Or(max(dq.Limit, 0), protocol.DefaultDLQLimit)
	var after int64
	if dq.After != "" {
		if after, err = parseDLQID(dq.After); err != nil {
			return nil, "", err
		}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, group_name, partition, msg_offset, producer_id, attempts, reason, error, dead_at, data, encoding, headers
		FROM comb_dead_letters
		WHERE queue_id = $1 AND ($2 = '' OR group_name = $2) AND id > $3
		ORDER BY id LIMIT $4`, q.ID, dq.Group, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("dead letters: %w", classify(err))
	}
	var (
		id       int64
		attempts int32
		enc      int16
		d        domain.DeadLetter
		dead     time.Time
		headers  []byte
	)
	out := []domain.DeadLetter{}
	_, err = pgx.ForEachRow(rows, []any{&id, &d.Group, &d.Partition, &d.Offset, &d.ID, &attempts, &d.Reason, &d.Error, &dead, &d.Data, &enc, &headers}, func() error {
		d.DLQID, d.Attempts, d.DeadAt, d.Encoding = "d-"+strconv.FormatInt(id, 10), int(attempts), dead, domain.Encoding(enc)
		d.Data = append([]byte(nil), d.Data...)
		d.Headers = nil
		if len(headers) > 0 {
			d.Headers = append(domain.Headers(nil), headers...)
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("dead letters: %w", classify(err))
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].DLQID
	}
	return out, next, nil
}

// ReplayDeadLetters pushes the chosen dead letters again into their
// partitions as new messages (every group sees them) and removes them from
// the list. A crash between the push and the removal leaves a replayed
// letter listed, never a lost one.
func (s *Store) ReplayDeadLetters(ctx context.Context, queue domain.QueueRef, ids []string) (int, error) {
	q, err := s.queue(ctx, queue, false)
	if err != nil {
		return 0, err
	}
	nums, err := parseDLQIDs(ids)
	if err != nil {
		return 0, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, partition, producer_id, data, encoding, headers FROM comb_dead_letters
		WHERE queue_id = $1 AND id = ANY($2) ORDER BY id`, q.ID, nums)
	if err != nil {
		return 0, fmt.Errorf("replay: %w", classify(err))
	}
	req := domain.PushParams{Queue: q.ref()}
	var found []int64
	var id int64
	var enc int16
	var m domain.PushMessage
	var headers []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &m.Partition, &m.ID, &m.Data, &enc, &headers}, func() error {
		m.Data, m.Encoding = append([]byte(nil), m.Data...), domain.Encoding(enc)
		m.Headers = nil
		if len(headers) > 0 {
			m.Headers = append(domain.Headers(nil), headers...)
		}
		req.Messages = append(req.Messages, m)
		found = append(found, id)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("replay: %w", classify(err))
	}
	if len(found) == 0 {
		return 0, nil
	}
	outs, err := s.Push(ctx, []domain.PushParams{req})
	if err != nil {
		return 0, err
	}
	if outs[0].Err != nil {
		return 0, outs[0].Err
	}
	return s.purge(ctx, q, found)
}

// PurgeDeadLetters removes the chosen dead letters.
func (s *Store) PurgeDeadLetters(ctx context.Context, queue domain.QueueRef, ids []string) (int, error) {
	q, err := s.queue(ctx, queue, false)
	if err != nil {
		return 0, err
	}
	nums, err := parseDLQIDs(ids)
	if err != nil {
		return 0, err
	}
	return s.purge(ctx, q, nums)
}

func (s *Store) purge(ctx context.Context, q queueRow, ids []int64) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM comb_dead_letters WHERE queue_id = $1 AND id = ANY($2)`, q.ID, ids)
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", classify(err))
	}
	return int(tag.RowsAffected()), nil
}
