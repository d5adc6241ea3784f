package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// peekSQL reads the segments holding offsets [$3, $3 + $4) of partition
// $2 of queue $1, starting at the partition's low offset when $3 is below
// it, with the partition's low and next offsets on every row (one row of
// NULL segment columns when no segment matches). The lower bound finds the
// segment holding the first offset through the primary key.
const peekSQL = `
WITH p AS (
    SELECT id, low_offset, next_offset, greatest($3::bigint, low_offset) AS start
    FROM comb_partitions WHERE queue_id = $1 AND name = $2
)
SELECT p.low_offset, p.next_offset, p.start, s.base_offset, s.count, s.created_at, s.payload, s.frame_format
FROM p LEFT JOIN LATERAL (
    SELECT base_offset, count, created_at, payload, frame_format FROM comb_segments
    WHERE partition_id = p.id
      AND base_offset >= coalesce((SELECT max(base_offset) FROM comb_segments
                                   WHERE partition_id = p.id AND base_offset <= p.start), 0)
      AND base_offset - p.start < $4::bigint -- no overflow near the largest offset
    ORDER BY base_offset
) s ON true
ORDER BY s.base_offset`

// Peek reads messages of one partition without leasing or changing
// anything: up to Limit of them from offset From, or with ID the one
// message of that producer id. A From below the partition's low offset
// (retention removed what was there) starts at the low offset. A partition
// never pushed to reads as empty. The queue must exist (domain.ErrNotFound).
//
// By id, the message is found through the dedup table, so only in a queue
// whose dedup_window_s is above 0 and within that window; a message
// retention removed is domain.ErrNotFound.
func (s *Store) Peek(ctx context.Context, pk domain.PeekParams) (domain.PeekPage, error) {
	q, err := s.queue(ctx, pk.Queue, false)
	if err != nil {
		return domain.PeekPage{}, err
	}
	if pk.ID != "" {
		return s.peekID(ctx, q, pk)
	}
	page, _, err := s.peekRange(ctx, q.ID, pk.Partition, pk.From, pk.Limit)
	return page, err
}

func (s *Store) peekID(ctx context.Context, q queueRow, pk domain.PeekParams) (domain.PeekPage, error) {
	if q.Config.DedupWindowS <= 0 {
		return domain.PeekPage{}, fmt.Errorf("no message with id %q (dedup_window_s is 0: ids are not remembered): %w",
			pk.ID, domain.ErrNotFound)
	}
	var off int64
	err := s.pool.QueryRow(ctx, `
		SELECT s.base_offset + x.rel
		FROM comb_partitions p
		JOIN comb_dedup_sets s ON s.partition_id = p.id
		CROSS JOIN LATERAL unnest(s.ids, s.rels) AS x(id, rel)
		WHERE p.queue_id = $1 AND p.name = $2 AND $3 = ANY(s.ids) AND x.id = $3
		  AND s.created_at > now() - $4 * interval '1 second'
		ORDER BY s.base_offset DESC LIMIT 1`, q.ID, pk.Partition, pk.ID, q.Config.DedupWindowS).Scan(&off)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.PeekPage{}, fmt.Errorf("no message with id %q in partition %q (within the dedup window of %d s): %w",
			pk.ID, pk.Partition, q.Config.DedupWindowS, domain.ErrNotFound)
	}
	if err != nil {
		return domain.PeekPage{}, fmt.Errorf("peek: find id: %w", classify(err))
	}
	page, low, err := s.peekRange(ctx, q.ID, pk.Partition, off, 1)
	if err != nil {
		return domain.PeekPage{}, err
	}
	if len(page.Messages) == 0 || page.Messages[0].Offset != off {
		return domain.PeekPage{}, fmt.Errorf("message with id %q was at offset %d, below the partition's low offset %d: removed by retention: %w",
			pk.ID, off, low, domain.ErrNotFound)
	}
	page.Next = -1 // one message, not a page
	return page, nil
}

// peekRange reads up to limit messages from offset from and returns them
// with the partition's low offset.
func (s *Store) peekRange(ctx context.Context, queueID int64, partition string, from int64, limit int) (domain.PeekPage, int64, error) {
	// One snapshot, so that the offsets and the segments agree.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return domain.PeekPage{}, 0, fmt.Errorf("peek: %w", classify(err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only; nothing to undo
	rows, err := tx.Query(ctx, peekSQL, queueID, partition, from, limit)
	if err != nil {
		return domain.PeekPage{}, 0, fmt.Errorf("peek: %w", classify(err))
	}
	page := domain.PeekPage{Messages: []domain.Message{}, Next: -1}
	var (
		low, next, start int64
		base             *int64
		count            *int32
		created          *time.Time
		payload          []byte
		format           *int16
	)
	_, err = pgx.ForEachRow(rows, []any{&low, &next, &start, &base, &count, &created, &payload, &format}, func() error {
		if base == nil {
			return nil
		}
		// pgx reuses payload's memory for the next row: copy it once per
		// segment, and let the messages alias the copy.
		rest := append([]byte(nil), payload...)
		for off := *base; off < *base+int64(*count) && len(page.Messages) < limit; off++ {
			f, r, err := readFrame(rest, *format)
			if err != nil {
				return fmt.Errorf("partition %q segment %d: %w", partition, *base, err)
			}
			rest = r
			if off < start {
				continue
			}
			page.Messages = append(page.Messages, domain.Message{
				Partition: partition, Offset: off, ID: string(f.id), CreatedAt: *created, Data: f.data, Encoding: f.enc, Headers: f.headers,
			})
		}
		return nil
	})
	if err != nil {
		return domain.PeekPage{}, 0, fmt.Errorf("peek: %w", classify(err))
	}
	after := start
	if n := len(page.Messages); n > 0 {
		after = page.Messages[n-1].Offset + 1
	}
	if after < next {
		page.Next = after
	}
	return page, low, nil
}
