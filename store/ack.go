package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ackCompletedSQL settles many "completed" acks, of any queues and groups,
// in one statement. It locks the cursors whose live lease an ack names, in
// key order (so it cannot deadlock with another ack batch), moves each one's
// committed offset past the highest acked offset inside the lease, and ends
// the lease when that offset is the lease's last. It returns the locked
// leases, from which the caller judges every ack.
const ackCompletedSQL = `
WITH x AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS x(pid, grp, lease, off)
), cur AS (
    SELECT c.partition_id, c.group_name, c.lease_id, c.lease_from, c.lease_upto
    FROM comb_cursors c
    WHERE (c.partition_id, c.group_name, c.lease_id) IN (SELECT DISTINCT pid, grp, lease FROM x)
      AND c.lease_until > now()
    ORDER BY c.partition_id, c.group_name
    FOR UPDATE OF c
), agg AS (
    SELECT cur.partition_id, cur.group_name, max(x.off) AS maxoff
    FROM cur JOIN x ON x.pid = cur.partition_id AND x.grp = cur.group_name AND x.lease = cur.lease_id
    WHERE x.off BETWEEN cur.lease_from AND cur.lease_upto
    GROUP BY cur.partition_id, cur.group_name
), upd AS (
    UPDATE comb_cursors c SET
        committed   = greatest(c.committed, agg.maxoff + 1),
        lease_id    = CASE WHEN agg.maxoff >= c.lease_upto THEN NULL ELSE c.lease_id END,
        lease_until = CASE WHEN agg.maxoff >= c.lease_upto THEN NULL ELSE c.lease_until END,
        attempts    = CASE WHEN agg.maxoff >= c.lease_upto THEN 0 ELSE c.attempts END
    FROM agg
    WHERE c.partition_id = agg.partition_id AND c.group_name = agg.group_name
    RETURNING c.partition_id
)
SELECT partition_id, group_name, lease_id, lease_from, lease_upto FROM cur`

// Messages of the ack results.
const (
	errLeaseGone      = "lease expired or not held by this group"
	errUnknownPart    = "unknown partition"
	errLeaseMismatch  = "lease belongs to another partition"
	errOutsideLeaseFm = "offset %d is outside its lease (%d to %d)"
)

type leaseKey struct {
	pid   int64
	group string
	lease string
}

type leaseSpan struct{ from, upto int64 }

// Ack settles the requests' acks and fills each request's Results or Err.
// Requests whose acks are all "completed" — the hot path — share one
// statement; a request with another status runs in its own transaction,
// applying its acks in order.
func (s *Store) Ack(ctx context.Context, reqs []*AckRequest) error {
	type fast struct {
		r    *AckRequest
		pids []int64 // per ack; 0 when the partition is unknown
	}
	var fasts []fast
	var (
		aPid    []int64
		aGroup  []string
		aLease  []string
		aOffset []int64
	)
	for _, r := range reqs {
		r.Err, r.Results = nil, nil
		if r.Group == "" {
			r.Group = DefaultGroup
		}
		q, err := s.queue(ctx, r.Queue, false)
		if err != nil {
			r.Err = err
			continue
		}
		names := make([]string, 0, 1)
		slow := false
		for i := range r.Acks {
			a := &r.Acks[i]
			switch a.Status {
			case "":
				a.Status = AckCompleted
			case AckCompleted:
			case AckRetry, AckFailed, AckDead:
				slow = true
			default:
				r.Err = fmt.Errorf("%w: ack %d: unknown status %q (completed, retry, failed or dead)", ErrInvalid, i, a.Status)
			}
			if !slices.Contains(names, a.Partition) {
				names = append(names, a.Partition)
			}
		}
		if r.Err != nil {
			continue
		}
		ids, err := s.partitionIDs(ctx, q, names, false)
		if err != nil {
			r.Err = err
			continue
		}
		if slow {
			if err := s.ackInOrder(ctx, q, r, ids); err != nil {
				r.Err = fmt.Errorf("ack: %w", classify(err))
			}
			continue
		}
		f := fast{r: r, pids: make([]int64, len(r.Acks))}
		for i, a := range r.Acks {
			pid := ids[a.Partition]
			if pid != 0 {
				pid = checkLease(a.Lease, pid)
			}
			f.pids[i] = pid
			if pid > 0 {
				aPid = append(aPid, pid)
				aGroup = append(aGroup, r.Group)
				aLease = append(aLease, a.Lease)
				aOffset = append(aOffset, a.Offset)
			}
		}
		fasts = append(fasts, f)
	}
	if len(fasts) == 0 {
		return nil
	}
	held := map[leaseKey]leaseSpan{}
	if len(aPid) > 0 {
		err := s.withRetry(ctx, func() error {
			clear(held)
			rows, err := s.pool.Query(ctx, ackCompletedSQL, aPid, aGroup, aLease, aOffset)
			if err != nil {
				return err
			}
			var k leaseKey
			var sp leaseSpan
			_, err = pgx.ForEachRow(rows, []any{&k.pid, &k.group, &k.lease, &sp.from, &sp.upto}, func() error {
				held[k] = sp
				return nil
			})
			return err
		})
		if err != nil {
			err = fmt.Errorf("ack: %w", classify(err))
			for _, f := range fasts {
				f.r.Err = err
			}
			return err
		}
	}
	for _, f := range fasts {
		f.r.Results = make([]AckResult, len(f.r.Acks))
		for i, a := range f.r.Acks {
			f.r.Results[i] = judgeAck(f.pids[i], held, leaseKey{f.pids[i], f.r.Group, a.Lease}, a.Offset)
		}
	}
	return nil
}

// Codes checkLease returns in place of a partition id.
const (
	leaseMalformed = -1
	leaseElsewhere = -2
)

// checkLease returns pid when the lease id names partition pid, else
// leaseMalformed or leaseElsewhere.
func checkLease(lease string, pid int64) int64 {
	switch lp := leasePartition(lease); {
	case lp < 0:
		return leaseMalformed
	case lp != pid:
		return leaseElsewhere
	}
	return pid
}

func judgeAck(pid int64, held map[leaseKey]leaseSpan, k leaseKey, off int64) AckResult {
	switch pid {
	case 0:
		return AckResult{Error: errUnknownPart}
	case leaseMalformed:
		return AckResult{Error: errLeaseGone}
	case leaseElsewhere:
		return AckResult{Error: errLeaseMismatch}
	}
	sp, ok := held[k]
	if !ok {
		return AckResult{Error: errLeaseGone}
	}
	if off < sp.from || off > sp.upto {
		return AckResult{Error: fmt.Sprintf(errOutsideLeaseFm, off, sp.from, sp.upto)}
	}
	return AckResult{OK: true}
}

// leasePartition returns the partition id a lease id names, or -1.
func leasePartition(lease string) int64 {
	rest, ok := strings.CutPrefix(lease, "l-")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, "-")
	if !ok {
		return -1
	}
	id, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return -1
	}
	return id
}

type cursorState struct {
	committed int64
	lease     string
	from      int64
	upto      int64
	live      bool
	attempts  int64
	changed   bool
}

// ackInOrder applies one request's acks in order in one transaction. It
// first locks every cursor the request names, in key order like the batch
// statement, so the two cannot deadlock.
func (s *Store) ackInOrder(ctx context.Context, q Queue, r *AckRequest, ids map[string]int64) error {
	var pids []int64
	for _, id := range ids {
		if id != 0 {
			pids = append(pids, id)
		}
	}
	slices.Sort(pids)
	return s.withRetry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			r.Results = make([]AckResult, len(r.Acks))
			rows, err := tx.Query(ctx, `
				SELECT partition_id, committed, coalesce(lease_id, ''), coalesce(lease_from, 0),
				       coalesce(lease_upto, -1), coalesce(lease_until > now(), false), attempts
				FROM comb_cursors WHERE group_name = $1 AND partition_id = ANY($2)
				ORDER BY partition_id FOR UPDATE`, r.Group, pids)
			if err != nil {
				return err
			}
			cur := map[int64]*cursorState{}
			var pid int64
			var c cursorState
			if _, err := pgx.ForEachRow(rows, []any{&pid, &c.committed, &c.lease, &c.from, &c.upto, &c.live, &c.attempts}, func() error {
				cc := c
				cur[pid] = &cc
				return nil
			}); err != nil {
				return err
			}
			for i, a := range r.Acks {
				pid := ids[a.Partition]
				c := cur[pid]
				switch {
				case pid == 0:
					r.Results[i] = AckResult{Error: errUnknownPart}
					continue
				case checkLease(a.Lease, pid) == leaseElsewhere:
					r.Results[i] = AckResult{Error: errLeaseMismatch}
					continue
				case c == nil || !c.live || c.lease != a.Lease:
					r.Results[i] = AckResult{Error: errLeaseGone}
					continue
				case a.Offset < c.from || a.Offset > c.upto:
					r.Results[i] = AckResult{Error: fmt.Sprintf(errOutsideLeaseFm, a.Offset, c.from, c.upto)}
					continue
				}
				if err := s.applyAck(ctx, tx, q, r.Group, a, pid, c); err != nil {
					return err
				}
				r.Results[i] = AckResult{OK: true}
			}
			for pid, c := range cur {
				if !c.changed {
					continue
				}
				lease := &c.lease
				if !c.live {
					lease = nil
				}
				if _, err := tx.Exec(ctx, `
					UPDATE comb_cursors SET committed = $3, attempts = $4, lease_id = $5,
					       lease_until = CASE WHEN $5::text IS NULL THEN NULL ELSE lease_until END
					WHERE partition_id = $1 AND group_name = $2`,
					pid, r.Group, c.committed, c.attempts, lease); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// applyAck applies one validated ack to a locked cursor's state.
func (s *Store) applyAck(ctx context.Context, tx pgx.Tx, q Queue, group string, a Ack, pid int64, c *cursorState) error {
	end := func() { c.live, c.lease, c.attempts = false, "", 0 }
	c.changed = true
	switch a.Status {
	case AckCompleted:
		c.committed = max(c.committed, a.Offset+1)
		if a.Offset >= c.upto {
			end()
		}
	case AckRetry:
		// Done up to N-1; N on is delivered again without spending an
		// attempt: the next pop adds back the one taken off here.
		c.committed = max(c.committed, a.Offset)
		att := max(c.attempts-1, 0)
		end()
		c.attempts = att
	case AckFailed:
		c.committed = max(c.committed, a.Offset)
		att := c.attempts
		end()
		c.attempts = att
		if att >= q.Config.MaxAttempts {
			if err := s.deadLetter(ctx, tx, q, group, a.Partition, pid, a.Offset, att, "failed"); err != nil {
				return err
			}
			c.committed, c.attempts = a.Offset+1, 0
		}
	case AckDead:
		if err := s.deadLetter(ctx, tx, q, group, a.Partition, pid, a.Offset, c.attempts, "dead"); err != nil {
			return err
		}
		c.committed = max(c.committed, a.Offset+1)
		if a.Offset >= c.upto {
			end()
		}
	}
	return nil
}

// deadLetter copies message off of a partition into the dead-letter table,
// unless the queue drops dead letters.
func (s *Store) deadLetter(ctx context.Context, tx pgx.Tx, q Queue, group, partition string, pid, off, attempts int64, reason string) error {
	if !q.Config.DeadLetter {
		return nil
	}
	var base int64
	var payload []byte
	err := tx.QueryRow(ctx, `
		SELECT base_offset, payload FROM comb_segments
		WHERE partition_id = $1 AND base_offset <= $2 ORDER BY base_offset DESC LIMIT 1`, pid, off).Scan(&base, &payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // retention removed it already; nothing to keep
	}
	if err != nil {
		return err
	}
	rest := payload
	for o := base; ; o++ {
		id, data, r, err := readFrame(rest)
		if err != nil {
			return nil // offset past the segment: removed by retention
		}
		if o == off {
			_, err := tx.Exec(ctx, `
				INSERT INTO comb_dead_letters (queue_id, group_name, partition_id, partition, msg_offset,
				                               producer_id, attempts, reason, data)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
				q.ID, group, pid, partition, off, string(id), attempts, reason, data)
			return err
		}
		rest = r
	}
}

// Renew extends live leases of a queue by leaseMS (0: the queue's lease_ms).
func (s *Store) Renew(ctx context.Context, queue string, leases []string, leaseMS int64) ([]RenewResult, error) {
	q, err := s.queue(ctx, queue, false)
	if err != nil {
		return nil, err
	}
	if leaseMS <= 0 {
		leaseMS = q.Config.LeaseMS
	}
	pids := make([]int64, len(leases))
	for i, l := range leases {
		pids[i] = leasePartition(l)
	}
	got := map[string]time.Time{}
	err = s.withRetry(ctx, func() error {
		clear(got)
		rows, err := s.pool.Query(ctx, `
			WITH cur AS (
			    SELECT c.partition_id, c.group_name FROM comb_cursors c
			    JOIN unnest($1::bigint[], $2::text[]) AS x(pid, lease)
			      ON c.partition_id = x.pid AND c.lease_id = x.lease
			    WHERE c.queue_id = $3 AND c.lease_until > now()
			    ORDER BY c.partition_id, c.group_name FOR UPDATE OF c)
			UPDATE comb_cursors c SET lease_until = now() + $4::bigint * interval '1 millisecond'
			FROM cur WHERE c.partition_id = cur.partition_id AND c.group_name = cur.group_name
			RETURNING c.lease_id, c.lease_until`, pids, leases, q.ID, leaseMS)
		if err != nil {
			return err
		}
		var l string
		var until time.Time
		_, err = pgx.ForEachRow(rows, []any{&l, &until}, func() error {
			got[l] = until
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("renew: %w", classify(err))
	}
	out := make([]RenewResult, len(leases))
	for i, l := range leases {
		if until, ok := got[l]; ok {
			out[i] = RenewResult{Lease: l, OK: true, ExpiresAt: until}
		} else {
			out[i] = RenewResult{Lease: l, Error: errLeaseGone}
		}
	}
	return out, nil
}
