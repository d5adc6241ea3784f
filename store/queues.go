package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
)

// queue returns a queue from the cache or PostgreSQL, creating it with
// DefaultConfig when create is set.
func (s *Store) queue(ctx context.Context, ref domain.QueueRef, create bool) (queueRow, error) {
	s.mu.Lock()
	cq, ok := s.queues[ref]
	s.mu.Unlock()
	if ok && time.Since(cq.fetched) < s.ttl {
		return cq.q, nil
	}
	q, err := s.loadQueue(ctx, s.pool, ref)
	if errors.Is(err, domain.ErrNotFound) && create {
		q, err = s.createQueue(ctx, ref, domain.DefaultQueueConfig())
	}
	if err != nil {
		return queueRow{}, err
	}
	s.cacheQueue(q)
	return q, nil
}

// CachedConfig returns a queue's settings as this store last read them,
// without asking PostgreSQL; ok is false when it has not read them lately.
func (s *Store) CachedConfig(ref domain.QueueRef) (c domain.QueueConfig, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cq, ok := s.queues[ref]
	if !ok || time.Since(cq.fetched) >= s.ttl {
		return domain.QueueConfig{}, false
	}
	return cq.q.Config, true
}

func (s *Store) cacheQueue(q queueRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.queues[q.ref()]; ok && old.q.ID != q.ID {
		s.forgetLocked(old.q)
	}
	s.queues[q.ref()] = cachedQueue{q: q, fetched: time.Now()}
}

// Reread makes the next call here that needs group of queue (its name as
// stored: the default group's resolved) read the group's row anew instead
// of what this store saw of it within its TTL: another broker sought the
// whole group (Seek), and the group's marking (migration 0018) and where
// its missing cursors stand (groupPlace) may have changed. The bridges
// say so to each other in a wake-up.
func (s *Store) Reread(ref domain.QueueRef, group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cq, ok := s.queues[ref]
	if !ok {
		return
	}
	k := groupKey{cq.q.ID, group}
	if _, ok := s.groups[k]; ok {
		s.groups[k] = time.Time{} // known, and past its TTL (makeGroup)
	}
}

// forget drops every cached fact about a queue, after it was deleted here or
// found missing.
func (s *Store) forget(ref domain.QueueRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cq, ok := s.queues[ref]; ok {
		s.forgetLocked(cq.q)
	}
}

func (s *Store) forgetLocked(q queueRow) {
	delete(s.queues, q.ref())
	for k := range s.parts {
		if k.queue == q.ID {
			delete(s.parts, k)
		}
	}
	delete(s.complete, q.ID)
	for k := range s.pending {
		if k.queue == q.ID {
			delete(s.pending, k)
		}
	}
	for k := range s.groups {
		if k.queue == q.ID {
			delete(s.groups, k)
			delete(s.scanFrom, k)
			delete(s.marking, k)
		}
	}
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) loadQueue(ctx context.Context, db querier, ref domain.QueueRef) (queueRow, error) {
	var q queueRow
	var raw []byte
	err := db.QueryRow(ctx, `SELECT id, tenant, name, config, created_at FROM comb_queues WHERE tenant = $1 AND name = $2`,
		ref.Tenant, ref.Name).Scan(&q.ID, &q.Tenant, &q.Name, &raw, &q.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return queueRow{}, fmt.Errorf("queue %q: %w", ref.Name, domain.ErrNotFound)
	}
	if err != nil {
		return queueRow{}, fmt.Errorf("load queue: %w", classify(err))
	}
	if q.Config, err = decodeConfig(raw); err != nil {
		return queueRow{}, err
	}
	return q, nil
}

func (s *Store) createQueue(ctx context.Context, ref domain.QueueRef, c domain.QueueConfig) (queueRow, error) {
	raw := encodeConfig(c)
	if s.maxQueues(ref.Tenant) > 0 {
		var q queueRow
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := s.insertQueue(ctx, tx, ref, raw); err != nil {
				return err
			}
			var err error
			q, err = s.loadQueue(ctx, tx, ref)
			return err
		})
		if errors.Is(err, domain.ErrLimit) {
			return queueRow{}, err
		}
		if err != nil {
			return queueRow{}, fmt.Errorf("create queue: %w", classify(err))
		}
		s.log.Info("created queue", "queue", ref)
		return q, nil
	}
	// ON CONFLICT DO UPDATE (a no-op) returns the row a concurrent creator
	// won with, so two bridges creating one queue agree on its id.
	var q queueRow
	err := s.pool.QueryRow(ctx, `
		INSERT INTO comb_queues (tenant, name, config) VALUES ($1, $2, $3)
		ON CONFLICT (tenant, name) DO UPDATE SET name = EXCLUDED.name
		RETURNING id, tenant, name, config, created_at`, ref.Tenant, ref.Name, raw).Scan(&q.ID, &q.Tenant, &q.Name, &raw, &q.CreatedAt)
	if err != nil {
		return queueRow{}, fmt.Errorf("create queue: %w", classify(err))
	}
	if q.Config, err = decodeConfig(raw); err != nil {
		return queueRow{}, err
	}
	s.log.Info("created queue", "queue", ref)
	return q, nil
}

// insertQueue creates ref with the settings raw in tx unless it exists.
// Under a tenant's max_queues it first takes the tenant's advisory lock, so
// that creators of different queues count one after the other, and refuses
// a new queue past the limit with a domain.ErrLimit that says when to look
// again.
func (s *Store) insertQueue(ctx context.Context, tx pgx.Tx, ref domain.QueueRef, raw []byte) error {
	if limit := s.maxQueues(ref.Tenant); limit > 0 {
		var others int64
		var exists bool
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('comb_tenant_queues:' || $1, 0))`, ref.Tenant); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE name <> $2), coalesce(bool_or(name = $2), false)
			FROM comb_queues WHERE tenant = $1`, ref.Tenant, ref.Name).Scan(&others, &exists)
		if err != nil {
			return err
		}
		if !exists && others >= limit {
			who := fmt.Sprintf("tenant %q", ref.Tenant)
			if ref.Tenant == "" {
				who = "the tenant"
			}
			return domain.RetryAfter(fmt.Errorf("%w: %s has %d queues; its max_queues is %d",
				domain.ErrLimit, who, others, limit), QuotaRetryAfter)
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO comb_queues (tenant, name, config) VALUES ($1, $2, $3) ON CONFLICT (tenant, name) DO NOTHING`,
		ref.Tenant, ref.Name, raw)
	return err
}

// maxQueues is a tenant's max_queues, 0 for none.
func (s *Store) maxQueues(tenant string) int64 {
	if s.queueLimit == nil {
		return 0
	}
	return s.queueLimit(tenant)
}

// QuotaRetryAfter is when a request refused by a tenant's max_queues may
// try again: a hint, as nothing tells when a queue will be deleted.
const QuotaRetryAfter = time.Second

// TenantUsage is what a tenant holds: its queues and their retained bytes.
type TenantUsage struct {
	Queues int64
	Bytes  int64
}

// TenantUsage reads what each of tenants holds. A tenant without queues is
// missing from the map. It reads every partition of those tenants: call it
// for the tenants that have limits, every few seconds at most.
func (s *Store) TenantUsage(ctx context.Context, tenants []string) (map[string]TenantUsage, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT q.tenant, count(DISTINCT q.id), coalesce(sum(p.retained_bytes), 0)::bigint
		FROM comb_queues q LEFT JOIN comb_partitions p ON p.queue_id = q.id
		WHERE q.tenant = ANY($1) GROUP BY q.tenant`, tenants)
	if err != nil {
		return nil, fmt.Errorf("tenant usage: %w", classify(err))
	}
	out := map[string]TenantUsage{}
	var t string
	var u TenantUsage
	if _, err := pgx.ForEachRow(rows, []any{&t, &u.Queues, &u.Bytes}, func() error {
		out[t] = u
		return nil
	}); err != nil {
		return nil, fmt.Errorf("tenant usage: %w", classify(err))
	}
	return out, nil
}

// Configure creates the queue if needed, merges patch into its settings and
// returns them. An out-of-range value is an domain.ErrInvalid naming the field.
func (s *Store) Configure(ctx context.Context, ref domain.QueueRef, patch domain.ConfigPatch) (domain.QueueConfig, error) {
	var out queueRow
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.insertQueue(ctx, tx, ref, encodeConfig(domain.DefaultQueueConfig())); err != nil {
			return err
		}
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT id, tenant, name, config, created_at FROM comb_queues WHERE tenant = $1 AND name = $2 FOR UPDATE`,
			ref.Tenant, ref.Name).Scan(&out.ID, &out.Tenant, &out.Name, &raw, &out.CreatedAt); err != nil {
			return err
		}
		cur, err := decodeConfig(raw)
		if err != nil {
			return err
		}
		if out.Config, err = patch.Apply(cur); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE comb_queues SET config = $2 WHERE id = $1`, out.ID, encodeConfig(out.Config))
		return err
	})
	if err != nil {
		if errors.Is(err, domain.ErrInvalid) || errors.Is(err, domain.ErrLimit) {
			return domain.QueueConfig{}, err
		}
		return domain.QueueConfig{}, fmt.Errorf("configure %q: %w", ref.Name, classify(err))
	}
	s.cacheQueue(out)
	return out.Config, nil
}

// Info returns a queue's settings and figures with one page of its
// partitions and one of its groups, or domain.ErrNotFound. The figures
// cover the whole queue; the pages are read in the same snapshot.
func (s *Store) Info(ctx context.Context, params domain.InfoParams) (domain.Info, error) {
	q, err := s.loadQueue(ctx, s.pool, params.Queue)
	if err != nil {
		return domain.Info{}, err
	}
	s.cacheQueue(q)
	info := domain.Info{Name: q.Name, Config: q.Config, CreatedAt: q.CreatedAt, Partitions: []domain.PartitionInfo{}, Groups: []domain.GroupInfo{}}
	// One more row than the page says whether another page follows.
	limit := params.Limit + 1
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			SELECT count(*), coalesce(sum(next_offset - low_offset), 0)::bigint, coalesce(sum(retained_bytes), 0)::bigint,
			       (SELECT count(*) FROM comb_groups WHERE queue_id = $1),
			       (SELECT count(*) FROM comb_dead_letters WHERE queue_id = $1)
			FROM comb_partitions WHERE queue_id = $1`, q.ID).
			Scan(&info.PartitionCount, &info.Messages, &info.Bytes, &info.GroupCount, &info.DeadLetters)
		if err != nil {
			return err
		}
		if !params.Partitions.Done {
			rows, err := tx.Query(ctx, `
				SELECT name, next_offset, low_offset FROM comb_partitions
				WHERE queue_id = $1 AND name > $2 ORDER BY name LIMIT $3`, q.ID, params.Partitions.After, limit)
			if err != nil {
				return err
			}
			info.Partitions, err = pgx.AppendRows(info.Partitions, rows, func(r pgx.CollectableRow) (domain.PartitionInfo, error) {
				var p domain.PartitionInfo
				err := r.Scan(&p.Name, &p.NextOffset, &p.LowOffset)
				return p, err
			})
			if err != nil {
				return err
			}
			info.Partitions, info.MorePartitions = trimPage(info.Partitions, params.Limit)
		}
		if !params.Groups.Done {
			rows, err := tx.Query(ctx, `
				SELECT g.name,
				       coalesce(sum(p.next_offset - `+groupAt+`), 0)::bigint,
				       count(*) FILTER (WHERE `+liveLease+`)
				FROM (SELECT queue_id, name, from_end, from_time FROM comb_groups
				      WHERE queue_id = $1 AND name > $2 ORDER BY name LIMIT $3) g`+groupPartitions+`
				GROUP BY g.name ORDER BY g.name`, q.ID, params.Groups.After, limit)
			if err != nil {
				return err
			}
			info.Groups, err = pgx.AppendRows(info.Groups, rows, func(r pgx.CollectableRow) (domain.GroupInfo, error) {
				var g domain.GroupInfo
				err := r.Scan(&g.Name, &g.Pending, &g.Leased)
				return g, err
			})
			if err != nil {
				return err
			}
			info.Groups, info.MoreGroups = trimPage(info.Groups, params.Limit)
		}
		return nil
	})
	if err != nil {
		return domain.Info{}, fmt.Errorf("info: %w", classify(err))
	}
	return info, nil
}

// List returns one page of a tenant's queues, ordered by name.
func (s *Store) List(ctx context.Context, params domain.ListParams) (domain.QueueList, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT q.name,
		       (SELECT count(*) FROM comb_partitions p WHERE p.queue_id = q.id),
		       (SELECT coalesce(sum(p.next_offset - p.low_offset), 0)::bigint FROM comb_partitions p WHERE p.queue_id = q.id),
		       (SELECT coalesce(sum(p.retained_bytes), 0)::bigint FROM comb_partitions p WHERE p.queue_id = q.id),
		       (SELECT count(*) FROM comb_groups g WHERE g.queue_id = q.id),
		       (SELECT coalesce(max(pending), 0)::bigint FROM (
		            SELECT sum(p.next_offset - `+groupAt+`) AS pending
		            FROM comb_groups g`+groupPartitions+`
		            WHERE g.queue_id = q.id GROUP BY g.name) g)
		FROM (SELECT id, name FROM comb_queues WHERE tenant = $1 AND name > $2 ORDER BY name LIMIT $3) q
		ORDER BY q.name`, params.Tenant, params.After, params.Limit+1)
	if err != nil {
		return domain.QueueList{}, fmt.Errorf("list: %w", classify(err))
	}
	out := domain.QueueList{Queues: []domain.QueueSummary{}}
	out.Queues, err = pgx.AppendRows(out.Queues, rows, func(r pgx.CollectableRow) (domain.QueueSummary, error) {
		var q domain.QueueSummary
		err := r.Scan(&q.Name, &q.Partitions, &q.Messages, &q.Bytes, &q.Groups, &q.Pending)
		return q, err
	})
	if err != nil {
		return domain.QueueList{}, fmt.Errorf("list: %w", classify(err))
	}
	out.Queues, out.More = trimPage(out.Queues, params.Limit)
	return out, nil
}

// trimPage cuts rows read with LIMIT limit+1 to a page of limit, and says
// whether the row beyond it was there: another page follows.
func trimPage[T any](rows []T, limit int) ([]T, bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}

// Delete removes a queue and all its data, or returns domain.ErrNotFound.
func (s *Store) Delete(ctx context.Context, ref domain.QueueRef) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `SELECT id FROM comb_queues WHERE tenant = $1 AND name = $2 FOR UPDATE`, ref.Tenant, ref.Name).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("queue %q: %w", ref.Name, domain.ErrNotFound)
		}
		if err != nil {
			return err
		}
		// Segments, cursors, ready rows and holds carry no foreign key (it would cost a
		// lookup on every push and pop), so they go explicitly; partitions go with
		// the queue's row (a trigger, migration 0016). Taking the row FOR UPDATE
		// first waits for every push making partitions, which holds it FOR KEY
		// SHARE, and keeps out those after.
		if _, err := tx.Exec(ctx, `DELETE FROM comb_segments WHERE partition_id IN (SELECT id FROM comb_partitions WHERE queue_id = $1)`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM comb_cursors WHERE queue_id = $1`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM comb_ready WHERE queue_id = $1`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM comb_holds WHERE partition_id IN (SELECT id FROM comb_partitions WHERE queue_id = $1)`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM comb_dedup_sets WHERE queue_id = $1`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM comb_queues WHERE id = $1`, id)
		return err
	})
	s.forget(ref)
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			return err
		}
		return fmt.Errorf("delete %q: %w", ref.Name, classify(err))
	}
	s.log.Info("deleted queue", "queue", ref)
	return nil
}
