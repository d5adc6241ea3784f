package store

import (
	"context"
	"fmt"

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
        SELECT 1 FROM comb_partitions p JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = k.grp
        WHERE p.queue_id = q.id AND p.name = k.part AND ` + cursorReady(`p.next_offset`) + `))`

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
	rows, err := s.pool.Query(ctx, anyReadySQL, tenants, queues, groups, parts)
	if err != nil {
		return nil, fmt.Errorf("ready: %w", classify(err))
	}
	var i int64
	if _, err := pgx.ForEachRow(rows, []any{&i}, func() error {
		out[i-1] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("ready: %w", classify(err))
	}
	return out, nil
}
