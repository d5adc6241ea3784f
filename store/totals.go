package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// QueueTotals are a queue's running totals, read in one pass for every
// queue, for samplers that derive rates from two readings taken apart.
// Pushed, and a group's Popped and Settled, only grow unless a seek, a
// delete or retention past an unsettled cursor moves them back.
type QueueTotals struct {
	Queue       domain.QueueRef
	Partitions  int64
	Pushed      int64 // messages ever pushed: the sum of the partitions' next offsets
	Messages    int64 // retained, as Info's Messages
	Bytes       int64 // retained payload bytes, as Info's Bytes
	DeadLetters int64
	Groups      []GroupTotals // ordered by name
}

// GroupTotals are one group's running totals over a queue.
type GroupTotals struct {
	Name string
	// Popped is the offsets delivered at least once or settled, summed
	// over the group's cursors: redeliveries do not count.
	Popped int64
	// Settled is the offsets the group has completed (or that retention
	// removed), summed over its cursors: the first unsettled offset of
	// each partition.
	Settled int64
	Pending int64 // as Info's GroupInfo.Pending
	Leased  int64 // as Info's GroupInfo.Leased
}

// Totals reads the totals of at most limit queues of every tenant, ordered
// by tenant and name, in one query. Its cost grows with the partitions and
// cursors of those queues: call it every few seconds at most, with a limit.
func (s *Store) Totals(ctx context.Context, limit int) ([]QueueTotals, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("totals: %w: limit %d, want at least 1", domain.ErrInvalid, limit)
	}
	rows, err := s.pool.Query(ctx, `
		WITH q AS (
		    SELECT id, tenant, name FROM comb_queues ORDER BY tenant, name LIMIT $1
		), p AS (
		    SELECT queue_id, count(*) AS parts, sum(next_offset) AS pushed,
		           sum(next_offset - low_offset) AS messages, sum(retained_bytes) AS bytes
		    FROM comb_partitions WHERE queue_id IN (SELECT id FROM q) GROUP BY queue_id
		), d AS (
		    SELECT queue_id, count(*) AS n FROM comb_dead_letters
		    WHERE queue_id IN (SELECT id FROM q) GROUP BY queue_id
		), g AS (
		    SELECT g.queue_id, g.name,
		           coalesce(sum(greatest(c.delivered_upto + 1, `+groupAt+`)), 0) AS popped,
		           coalesce(sum(`+groupAt+`), 0) AS settled,
		           coalesce(sum(p.next_offset - `+groupAt+`), 0) AS pending,
		           count(*) FILTER (WHERE `+liveLease+`) AS leased
		    FROM comb_groups g`+groupPartitions+`
		    WHERE g.queue_id IN (SELECT id FROM q)
		    GROUP BY g.queue_id, g.name
		)
		SELECT q.tenant, q.name, coalesce(p.parts, 0), coalesce(p.pushed, 0)::bigint,
		       coalesce(p.messages, 0)::bigint, coalesce(p.bytes, 0)::bigint, coalesce(d.n, 0),
		       g.name, coalesce(g.popped, 0)::bigint, coalesce(g.settled, 0)::bigint,
		       coalesce(g.pending, 0)::bigint, coalesce(g.leased, 0)
		FROM q
		LEFT JOIN p ON p.queue_id = q.id
		LEFT JOIN d ON d.queue_id = q.id
		LEFT JOIN g ON g.queue_id = q.id
		ORDER BY q.tenant, q.name, g.name`, limit)
	if err != nil {
		return nil, fmt.Errorf("totals: %w", classify(err))
	}
	out := []QueueTotals{}
	var (
		qt    QueueTotals
		group *string
		gt    GroupTotals
	)
	_, err = pgx.ForEachRow(rows, []any{&qt.Queue.Tenant, &qt.Queue.Name, &qt.Partitions, &qt.Pushed, &qt.Messages, &qt.Bytes,
		&qt.DeadLetters, &group, &gt.Popped, &gt.Settled, &gt.Pending, &gt.Leased}, func() error {
		if n := len(out); n == 0 || out[n-1].Queue != qt.Queue {
			qt.Groups = []GroupTotals{}
			out = append(out, qt)
		}
		if group != nil {
			gt.Name = *group
			last := &out[len(out)-1]
			last.Groups = append(last.Groups, gt)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("totals: %w", classify(err))
	}
	return out, nil
}
