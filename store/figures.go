package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// GroupFiguresParams bounds a GroupFigures read.
type GroupFiguresParams struct {
	// Limit is the most groups returned, in (tenant, queue, group) order;
	// 0 means DefaultGroupFiguresLimit.
	Limit int
}

// DefaultGroupFiguresLimit is GroupFiguresParams.Limit's default.
const DefaultGroupFiguresLimit = 10000

// GroupFigures is one consumer group's live figures over one queue.
type GroupFigures struct {
	Tenant, Queue, Group string
	// Depth is the messages the group has not completed (retained ones).
	Depth int64
	// OldestAge is how long ago the oldest of them was pushed (its
	// segment's commit time); 0 when Depth is 0.
	OldestAge time.Duration
	// LeasesActive counts the group's live leases; LeasesExpired those
	// past their time that no pop or ack has ended yet. Neither counts a
	// retry's hold (see holdPrefix).
	LeasesActive, LeasesExpired int64
}

// groupFiguresSQL reads every group's figures in one statement: one pass
// over each group's partitions and its cursors there (a group with no
// cursor on a partition yet is at the oldest retained message,
// cursorReady), and for each with a backlog one probe of the segments'
// primary key for the segment that holds its first unsettled offset (a
// segment is one transaction: its created_at is that message's).
// Metrics read every queue's groups (groupFiguresSQL); the groups verb
// reads one queue's (queueGroupsSQL): the same statement, filtered.
// groupPartitions joins each group g to every partition p of its queue
// and to its cursor c there: NULLs where it has none yet (cursors are made
// lazily, makeMissingCursors), which every figure reads where groupAt
// puts it: at the oldest retained message, or at the end for a group that
// starts there. The rows a group's figures are summed over.
const groupPartitions = `
LEFT JOIN comb_partitions p ON p.queue_id = g.queue_id
LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = g.name`

var groupFiguresSelect = `
SELECT q.tenant, q.name, g.name,
       coalesce(sum(p.next_offset - ` + groupAt + `), 0)::bigint,
       coalesce(extract(epoch FROM now() - min(o.created_at)), 0)::float8,
       count(*) FILTER (WHERE ` + liveLease + `),
       count(*) FILTER (WHERE c.lease_id IS NOT NULL AND c.lease_until <= now() AND NOT ` + isHeld + `)
FROM comb_groups g
JOIN comb_queues q ON q.id = g.queue_id` + groupPartitions + `
LEFT JOIN LATERAL (
    SELECT s.created_at FROM comb_segments s
    WHERE p.next_offset > ` + groupAt + `
      AND s.partition_id = p.id AND s.base_offset <= ` + groupAt + `
    ORDER BY s.base_offset DESC LIMIT 1) o ON true
`

var groupFiguresSQL = groupFiguresSelect + `
GROUP BY q.tenant, q.name, g.name
ORDER BY q.tenant, q.name, g.name
LIMIT $1`

var queueGroupsSQL = groupFiguresSelect + `
WHERE g.queue_id = $1
GROUP BY q.tenant, q.name, g.name
ORDER BY g.name`

// GroupFigures reads every consumer group's depth, oldest unsettled
// message and leases, for metrics. Its cost grows with partitions times
// groups: call it every second or so at most.
func (s *Store) GroupFigures(ctx context.Context, p GroupFiguresParams) ([]GroupFigures, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultGroupFiguresLimit
	}
	rows, err := s.pool.Query(ctx, groupFiguresSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("group figures: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, scanGroupFigures)
	if err != nil {
		return nil, fmt.Errorf("group figures: %w", classify(err))
	}
	return out, nil
}

// scanGroupFigures reads one row of groupFiguresSelect.
func scanGroupFigures(r pgx.CollectableRow) (GroupFigures, error) {
	var g GroupFigures
	var age float64
	err := r.Scan(&g.Tenant, &g.Queue, &g.Group, &g.Depth, &age, &g.LeasesActive, &g.LeasesExpired)
	g.OldestAge = time.Duration(max(age, 0) * float64(time.Second))
	return g, err
}

// PoolStat is one connection pool's figures.
type PoolStat struct {
	// Name is "main" (pushes, acks, everything else) or "pop" (pops).
	Name string
	Stat *pgxpool.Stat
}

// PoolStats returns the figures of the store's connection pools.
func (s *Store) PoolStats() []PoolStat {
	return []PoolStat{{Name: "main", Stat: s.pool.Stat()}, {Name: "pop", Stat: s.popPool.Stat()}}
}
