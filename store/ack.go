package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// ackCompletedSQL settles many "completed" acks, of any queues and groups,
// in one statement. It locks the cursors whose live lease an ack names, in
// key order (so it cannot deadlock with another ack batch), moves each one's
// committed offset past the highest acked offset inside the lease, and ends
// the lease when that offset is the lease's last. It returns the locked
// leases, with the partition's next offset, from which the caller judges
// every ack, and the committed offset before it, from which it counts the
// messages each ack settled.
var ackCompletedSQL = `
WITH x AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS x(pid, grp, lease, off)
), cur AS (
    SELECT c.partition_id, c.group_name, c.lease_id, c.lease_from, c.lease_upto, c.committed
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
        attempts    = ` + attemptsAfterAck(`agg.maxoff`) + `
    FROM agg
    WHERE c.partition_id = agg.partition_id AND c.group_name = agg.group_name
    RETURNING c.partition_id
)
SELECT cur.partition_id, cur.group_name, cur.lease_id, cur.lease_from, cur.lease_upto, p.next_offset, cur.committed
FROM cur JOIN comb_partitions p ON p.id = cur.partition_id`

// attemptsAfterAck is a cursor c's attempt count once an ack at offset
// off has settled everything up to it (completed, dead). Within the lease
// nothing changes. An ack that ends the lease resets it, unless messages
// the cursor delivered before remain past the lease (delivered_upto): a
// redelivery that took only the first of an expired lease's messages
// counted one more attempt for all of them, and the rest were last
// delivered one attempt before it (at most: a message comes again with
// every message before it, so it has been delivered no more often than
// they). Reset, the pop after would deliver them again as attempt 1
// (TestPartialRedeliveryKeepsAttempts). So a message's attempt is never
// below the number of its deliveries, and equals it except after a
// partial redelivery of a partial redelivery.
func attemptsAfterAck(off string) string {
	return `CASE WHEN ` + off + ` < c.lease_upto THEN c.attempts
                 WHEN ` + off + ` < c.delivered_upto THEN greatest(c.attempts - 1, 0) ELSE 0 END`
}

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

// leaseSpan is a locked lease: next is the partition's next offset, done
// the cursor's committed offset, moved by each ack judged.
type leaseSpan struct{ from, upto, next, done int64 }

// Ack settles the requests' acks and returns an outcome per request, in
// order. Requests whose acks are all AckCompleted — the hot path — share
// one statement; a request with another status runs in its own
// transaction, applying its acks in order. It returns an error, set in the
// outcomes of the shared statement too, when that statement failed.
func (s *Store) Ack(ctx context.Context, reqs []domain.AckParams) ([]domain.AckOutcome, error) {
	outs := make([]domain.AckOutcome, len(reqs))
	type fast struct {
		i    int     // request index
		pids []int64 // per ack; 0 when the partition is unknown
	}
	var fasts []fast
	var (
		aPid    []int64
		aGroup  []string
		aLease  []string
		aOffset []int64
	)
	for ri, r := range reqs {
		group := cmp.Or(r.Group, protocol.DefaultGroup)
		q, err := s.queue(ctx, r.Queue, false)
		if err != nil {
			outs[ri].Err = err
			continue
		}
		names := make([]string, 0, 1)
		slow := false
		for _, a := range r.Acks {
			switch a.Status {
			case domain.AckCompleted:
			case domain.AckRetry, domain.AckFailed, domain.AckDead:
				slow = true
			default:
				outs[ri].Err = fmt.Errorf("%w: unknown ack status %d", domain.ErrInvalid, a.Status)
			}
			if !slices.Contains(names, a.Partition) {
				names = append(names, a.Partition)
			}
		}
		if outs[ri].Err != nil {
			continue
		}
		ids, err := s.partitionIDs(ctx, q, names, false)
		if err != nil {
			outs[ri].Err = err
			continue
		}
		if slow {
			res, err := s.ackInOrder(ctx, s.pool, q, group, r.Acks, ids, s.ackCommit)
			if err != nil {
				outs[ri].Err = fmt.Errorf("ack: %w", classify(err))
			} else {
				outs[ri].Results = res
			}
			continue
		}
		f := fast{i: ri, pids: make([]int64, len(r.Acks))}
		for i, a := range r.Acks {
			pid := ids[a.Partition]
			if pid != 0 {
				pid = checkLease(a.Lease, pid)
			}
			f.pids[i] = pid
			if pid > 0 {
				aPid = append(aPid, pid)
				aGroup = append(aGroup, group)
				aLease = append(aLease, a.Lease)
				aOffset = append(aOffset, a.Offset)
			}
		}
		fasts = append(fasts, f)
	}
	if len(fasts) == 0 {
		return outs, nil
	}
	held := map[leaseKey]leaseSpan{}
	if len(aPid) > 0 {
		err := s.withRetry(ctx, func() error {
			clear(held)
			b := &pgx.Batch{}
			b.Queue(s.ackPlans)
			b.Queue(ackCompletedSQL, aPid, aGroup, aLease, aOffset)
			br := s.pool.SendBatch(ctx, b)
			defer br.Close()
			if _, err := br.Exec(); err != nil {
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			var k leaseKey
			var sp leaseSpan
			if _, err = pgx.ForEachRow(rows, []any{&k.pid, &k.group, &k.lease, &sp.from, &sp.upto, &sp.next, &sp.done}, func() error {
				held[k] = sp
				return nil
			}); err != nil {
				return err
			}
			return br.Close()
		})
		if err != nil {
			err = fmt.Errorf("ack: %w", classify(err))
			if s.log.Enabled(ctx, slog.LevelDebug) {
				// PostgreSQL may have applied them all the same (a
				// connection lost after the commit was sent).
				for i := range aPid {
					s.log.DebugContext(ctx, "ack failed", "partition_id", aPid[i], "group", aGroup[i],
						"lease", aLease[i], "offset", aOffset[i], "err", err)
				}
			}
			for _, f := range fasts {
				outs[f.i].Err = err
			}
			return outs, err
		}
	}
	for _, f := range fasts {
		r := reqs[f.i]
		group := cmp.Or(r.Group, protocol.DefaultGroup)
		res := make([]domain.AckResult, len(r.Acks))
		for i, a := range r.Acks {
			res[i] = judgeAck(f.pids[i], held, leaseKey{f.pids[i], group, a.Lease}, a.Offset)
		}
		if s.log.Enabled(ctx, slog.LevelDebug) {
			for i, a := range r.Acks {
				s.logAck(ctx, r.Queue, group, f.pids[i], a, res[i], nil)
			}
		}
		outs[f.i].Results = res
	}
	return outs, nil
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

func judgeAck(pid int64, held map[leaseKey]leaseSpan, k leaseKey, off int64) domain.AckResult {
	switch pid {
	case 0:
		return domain.AckResult{Error: errUnknownPart}
	case leaseMalformed:
		return domain.AckResult{Error: errLeaseGone}
	case leaseElsewhere:
		return domain.AckResult{Error: errLeaseMismatch}
	}
	sp, ok := held[k]
	if !ok {
		return domain.AckResult{Error: errLeaseGone}
	}
	if off < sp.from || off > sp.upto {
		return domain.AckResult{Error: fmt.Sprintf(errOutsideLeaseFm, off, sp.from, sp.upto)}
	}
	// An ack inside its lease leaves the partition leased; one that ends
	// it frees the partition, worth a pop only with messages past it.
	freed := off >= sp.upto
	settled := max(off+1-max(sp.done, sp.from), 0)
	sp.done = max(sp.done, off+1)
	held[k] = sp
	return domain.AckResult{OK: true, Freed: freed, More: freed && sp.next > sp.upto+1, Settled: settled}
}

// holdPrefix starts the lease id of a hold: a cursor that a retry or
// failed ack with a delay left "leased" to nobody until lease_until, so
// that no pop takes the partition before the delay has passed (pops take a
// cursor whose lease_id is NULL or whose lease_until has passed; see
// popSQL). A hold is not a lease: no ack or renew can name it
// (leasePartition refuses it, ackInOrder too), and figures do not count it
// (liveLease). The partition's later messages wait behind the held one, as
// they wait behind a leased one: a group gets a partition in offset order.
const holdPrefix = "h-"

// holdID is the lease id of a hold on partition pid.
func holdID(pid int64) string { return holdPrefix + strconv.FormatInt(pid, 10) }

// isHeld is the SQL condition on comb_cursors c of a hold, elapsed or not;
// liveLease that of a live lease: one that has not expired and is not a
// hold.
const (
	isHeld    = `(c.lease_id LIKE '` + holdPrefix + `%')`
	liveLease = `(c.lease_until > now() AND NOT ` + isHeld + `)`
)

// leasePrefix starts every lease id: "l-", the partition id, "-", and the
// pop's random token (leaseToken). popTail builds the same in SQL.
const leasePrefix = "l-"

// leaseID is the lease id of partition pid under token.
func leaseID(pid int64, token string) string {
	return leasePrefix + strconv.FormatInt(pid, 10) + "-" + token
}

// leasePartition returns the partition id a lease id names, or -1.
func leasePartition(lease string) int64 {
	rest, ok := strings.CutPrefix(lease, leasePrefix)
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
	delivered int64 // delivered_upto
	changed   bool
	holdMS    int64 // > 0: the ack ended the lease with a hold this long
}

// ackInOrder applies one request's acks in order in one transaction on db:
// the pool, or a transaction's savepoint (Txn). It first locks every cursor
// the request names, in key order like the batch statement, so the two
// cannot deadlock. settings, when not empty, is a statement run first that
// sets the transaction's settings (Store.ackCommit); a Txn's savepoint
// leaves its transaction's alone.
func (s *Store) ackInOrder(ctx context.Context, db writer, q queueRow, group string, acks []domain.Ack, ids map[string]int64, settings string) ([]domain.AckResult, error) {
	var pids []int64
	for _, id := range ids {
		if id != 0 {
			pids = append(pids, id)
		}
	}
	slices.Sort(pids)
	var results []domain.AckResult
	err := s.withRetry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			results = make([]domain.AckResult, len(acks))
			if settings != "" {
				if _, err := tx.Exec(ctx, settings); err != nil {
					return err
				}
			}
			rows, err := tx.Query(ctx, `
				SELECT partition_id, committed, coalesce(lease_id, ''), coalesce(lease_from, 0),
				       coalesce(lease_upto, -1), coalesce(lease_until > now(), false), attempts, delivered_upto
				FROM comb_cursors WHERE group_name = $1 AND partition_id = ANY($2)
				ORDER BY partition_id FOR UPDATE`, group, pids)
			if err != nil {
				return err
			}
			cur := map[int64]*cursorState{}
			var pid int64
			var c cursorState
			if _, err := pgx.ForEachRow(rows, []any{&pid, &c.committed, &c.lease, &c.from, &c.upto, &c.live, &c.attempts, &c.delivered}, func() error {
				cc := c
				cur[pid] = &cc
				return nil
			}); err != nil {
				return err
			}
			for i, a := range acks {
				pid := ids[a.Partition]
				c := cur[pid]
				switch {
				case pid == 0:
					results[i] = domain.AckResult{Error: errUnknownPart}
					continue
				case checkLease(a.Lease, pid) == leaseElsewhere:
					results[i] = domain.AckResult{Error: errLeaseMismatch}
					continue
				case c == nil || !c.live || c.lease != a.Lease || strings.HasPrefix(a.Lease, holdPrefix):
					results[i] = domain.AckResult{Error: errLeaseGone}
					continue
				case a.Offset < c.from || a.Offset > c.upto:
					results[i] = domain.AckResult{Error: fmt.Sprintf(errOutsideLeaseFm, a.Offset, c.from, c.upto)}
					continue
				}
				r, err := s.applyAck(ctx, tx, q, group, a, pid, c)
				if err != nil {
					return err
				}
				if s.log.Enabled(ctx, slog.LevelDebug) {
					s.logAck(ctx, q.ref(), group, pid, a, r, c)
				}
				// Retry and failed make messages deliverable again; the
				// rarer statuses wake the group's pops without asking more.
				// A hold makes them deliverable later: nothing to wake now.
				r.OK, r.More, r.Freed = true, c.holdMS == 0, !c.live && c.holdMS == 0
				results[i] = r
			}
			for pid, c := range cur {
				if !c.changed {
					continue
				}
				lease := &c.lease
				switch {
				case c.holdMS > 0:
					h := holdID(pid)
					lease = &h
				case !c.live:
					lease = nil
				}
				if _, err := tx.Exec(ctx, `
					UPDATE comb_cursors SET committed = $3, attempts = $4, lease_id = $5,
					       lease_until = CASE WHEN $5::text IS NULL THEN NULL
					                          WHEN $6::bigint > 0 THEN now() + $6::bigint * interval '1 millisecond'
					                          ELSE lease_until END
					WHERE partition_id = $1 AND group_name = $2`,
					pid, group, c.committed, c.attempts, lease, c.holdMS); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return results, err
}

// logAck logs, at debug level, one ack and what it did: with c (an ack
// other than completed, ackInOrder) the cursor it left, committed offset
// and attempt count; a delivery's attempt number is judged against them
// (see Store.logLeases).
func (s *Store) logAck(ctx context.Context, queue domain.QueueRef, group string, pid int64, a domain.Ack, r domain.AckResult, c *cursorState) {
	attrs := []any{"queue", queue.Name, "group", group, "partition_id", pid, "lease", a.Lease,
		"offset", a.Offset, "status", a.Status, "ok", r.Error == "", "error", r.Error}
	if c != nil {
		attrs = append(attrs, "committed", c.committed, "attempts", c.attempts, "lease_ended", !c.live)
	}
	s.log.DebugContext(ctx, "ack applied", attrs...)
}

// applyAck applies one validated ack to a locked cursor's state, and
// returns the messages it settled, retried and gave up, and how long it
// holds the partition back (retry and failed: the ack's delay, else for
// failed the queue's retry delay for the attempt; none when it
// dead-letters).
func (s *Store) applyAck(ctx context.Context, tx pgx.Tx, q queueRow, group string, a domain.Ack, pid int64, c *cursorState) (domain.AckResult, error) {
	var r domain.AckResult
	end := func() { c.live, c.lease, c.attempts = false, "", 0 }
	// settled ends the lease when an ack at off settled all of it, its
	// attempts as attemptsAfterAck says.
	settled := func(off int64) {
		if off < c.upto {
			return
		}
		att := int64(0)
		if off < c.delivered {
			att = max(c.attempts-1, 0)
		}
		end()
		c.attempts = att
	}
	before, upto := max(c.committed, c.from), c.upto
	c.changed = true
	switch a.Status {
	case domain.AckCompleted:
		c.committed = max(c.committed, a.Offset+1)
		settled(a.Offset)
	case domain.AckRetry:
		// Done up to N-1; N on is delivered again without spending an
		// attempt: the next pop adds back the one taken off here.
		c.committed = max(c.committed, a.Offset)
		att := max(c.attempts-1, 0)
		end()
		c.attempts = att
		r.Retried = upto - a.Offset + 1
		if a.DelayMS != nil {
			c.holdMS = *a.DelayMS
		}
	case domain.AckFailed:
		c.committed = max(c.committed, a.Offset)
		att := c.attempts
		end()
		c.attempts = att
		r.Retried = upto - a.Offset + 1
		if a.DelayMS != nil {
			c.holdMS = *a.DelayMS
		} else {
			c.holdMS = q.Config.RetryDelay(att)
		}
		if att >= q.Config.MaxAttempts {
			c.holdMS = 0 // the message is given up: the rest goes at once
			n, err := s.deadLetter(ctx, tx, q, group, a.Partition, pid, a.Offset, att, protocol.AckFailed, a.Error)
			if err != nil {
				return r, err
			}
			c.committed, c.attempts = a.Offset+1, 0
			r.Retried--
			r.Dead, r.DeadBytes = true, n
		}
	case domain.AckDead:
		n, err := s.deadLetter(ctx, tx, q, group, a.Partition, pid, a.Offset, c.attempts, protocol.AckDead, a.Error)
		if err != nil {
			return r, err
		}
		c.committed = max(c.committed, a.Offset+1)
		settled(a.Offset)
		r.Dead, r.DeadBytes = true, n
	}
	// The messages before the acked one are done; a completed ack's own
	// too (a dead one's is counted as dead).
	last := a.Offset
	if a.Status == domain.AckCompleted {
		last++
	}
	r.Settled = max(last-before, 0)
	r.Hold = time.Duration(c.holdMS) * time.Millisecond
	return r, nil
}

// deadLetter copies message off of a partition into the dead-letter table,
// with the reason and the ack's error text, unless the queue drops dead
// letters, and returns the bytes it kept.
func (s *Store) deadLetter(ctx context.Context, tx pgx.Tx, q queueRow, group, partition string, pid, off, attempts int64, reason, errText string) (int64, error) {
	if !q.Config.DeadLetter {
		return 0, nil
	}
	var base int64
	var payload []byte
	var format int16
	err := tx.QueryRow(ctx, `
		SELECT base_offset, payload, frame_format FROM comb_segments
		WHERE partition_id = $1 AND base_offset <= $2
		  AND $2 >= (SELECT low_offset FROM comb_partitions WHERE id = $1)
		ORDER BY base_offset DESC LIMIT 1`, pid, off).Scan(&base, &payload, &format)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil // retention removed it already; nothing to keep
	}
	if err != nil {
		return 0, err
	}
	rest := payload
	for o := base; ; o++ {
		f, r, err := readFrame(rest, format)
		if err != nil {
			return 0, nil // offset past the segment: removed by retention
		}
		if o == off {
			_, err := tx.Exec(ctx, `
				INSERT INTO comb_dead_letters (queue_id, group_name, partition_id, partition, msg_offset,
				                               producer_id, attempts, reason, data, encoding, headers, error)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
				q.ID, group, pid, partition, off, string(f.id), attempts, reason, f.data, int16(f.enc), []byte(f.headers), errText)
			return int64(len(f.data) + len(f.headers)), err
		}
		rest = r
	}
}

// Renew extends live leases of a queue by LeaseMS from now (0: the queue's
// lease_ms) and returns one result per lease.
func (s *Store) Renew(ctx context.Context, req domain.RenewParams) ([]domain.RenewResult, error) {
	q, err := s.queue(ctx, req.Queue, false)
	if err != nil {
		return nil, err
	}
	leases, leaseMS := req.Leases, req.LeaseMS
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
	out := make([]domain.RenewResult, len(leases))
	for i, l := range leases {
		if until, ok := got[l]; ok {
			out[i] = domain.RenewResult{Lease: l, OK: true, ExpiresAt: until}
		} else {
			out[i] = domain.RenewResult{Lease: l, Error: errLeaseGone}
		}
	}
	return out, nil
}
