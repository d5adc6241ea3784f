package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// segmentBuf collects one partition's messages of a push transaction.
type segmentBuf struct {
	id     int64
	n      int64
	bytes  int64
	frames []byte
	base   int64
	ok     bool
}

// Push appends the requests' messages in one transaction and fills each
// request's Results, or its Err when that request alone was refused (a
// limit, a too-large message). It returns an error, and sets every Err, when
// the transaction itself failed. A queue that does not exist is created with
// DefaultConfig.
//
// The transaction writes one segment row per partition it touches, however
// many messages and requests it carries, and allocates offsets under the
// partition rows' locks, taken in id order and held to commit, so that
// offsets become visible in commit order and concurrent pushes cannot
// deadlock.
func (s *Store) Push(ctx context.Context, reqs []*PushRequest) error {
	retry, err := s.push(ctx, reqs)
	if err != nil || len(retry) == 0 {
		return err
	}
	// A queue was deleted under a cached partition id: forget it and push
	// those requests once more (the push recreates the queue).
	for _, r := range retry {
		s.forget(r.Queue)
	}
	retry, err = s.push(ctx, retry)
	for _, r := range retry {
		r.Err = fmt.Errorf("push: queue %q changed during the push, retry: %w", r.Queue, ErrConflict)
	}
	return err
}

func (s *Store) push(ctx context.Context, reqs []*PushRequest) (retry []*PushRequest, err error) {
	segs := map[int64]*segmentBuf{}
	// where[i][j] is the segment and index of message j of request i.
	type loc struct {
		seg *segmentBuf
		idx int64
	}
	where := make([][]loc, len(reqs))
	for i, r := range reqs {
		r.Err, r.Results = nil, nil
		q, err := s.queue(ctx, r.Queue, true)
		if err != nil {
			r.Err = err
			continue
		}
		names := make([]string, 0, 1)
		for j := range r.Messages {
			m := &r.Messages[j]
			if m.Partition == "" {
				m.Partition = DefaultPartition
			}
			if int64(len(m.Data)) > q.Config.MaxMessageBytes {
				r.Err = fmt.Errorf("%w: message %d is %d bytes, over the queue's max_message_bytes of %d",
					ErrTooLarge, j, len(m.Data), q.Config.MaxMessageBytes)
				break
			}
			if !slices.Contains(names, m.Partition) {
				names = append(names, m.Partition)
			}
		}
		if r.Err != nil {
			continue
		}
		ids, err := s.partitionIDs(ctx, q, names, true)
		if err != nil {
			r.Err = err
			continue
		}
		where[i] = make([]loc, len(r.Messages))
		for j, m := range r.Messages {
			id := ids[m.Partition]
			seg := segs[id]
			if seg == nil {
				seg = &segmentBuf{id: id}
				segs[id] = seg
			}
			seg.frames = appendFrame(seg.frames, m.ID, m.Data)
			seg.bytes += int64(len(m.Data))
			where[i][j] = loc{seg, seg.n}
			seg.n++
		}
	}
	if len(segs) == 0 {
		for _, r := range reqs {
			if r.Err == nil {
				r.Results = []PushResult{}
			}
		}
		return nil, nil
	}

	pids := make([]int64, 0, len(segs))
	for id := range segs {
		pids = append(pids, id)
	}
	slices.Sort(pids)
	ns := make([]int64, len(pids))
	bs := make([]int64, len(pids))
	payloads := make([][]byte, len(pids))
	for k, id := range pids {
		ns[k], bs[k], payloads[k] = segs[id].n, segs[id].bytes, segs[id].frames
	}

	// One round trip: pgx sends the batch with a single Sync, so its
	// statements run in one implicit transaction.
	b := &pgx.Batch{}
	b.Queue(`SELECT id FROM comb_partitions WHERE id = ANY($1) ORDER BY id FOR UPDATE`, pids)
	b.Queue(`
		UPDATE comb_partitions p
		SET next_offset = p.next_offset + x.n, retained_bytes = p.retained_bytes + x.b
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(pid, n, b)
		WHERE p.id = x.pid
		RETURNING p.id, p.next_offset - x.n`, pids, ns, bs)
	b.Queue(`
		INSERT INTO comb_segments (partition_id, base_offset, count, bytes, payload)
		SELECT x.pid, p.next_offset - x.n, x.n, x.b, x.payload
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bytea[]) AS x(pid, n, b, payload)
		JOIN comb_partitions p ON p.id = x.pid`, pids, ns, bs, payloads)
	err = func() error {
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var id, base int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &base}, func() error {
			if seg := segs[id]; seg != nil {
				seg.base, seg.ok = base, true
			}
			return nil
		}); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		err = fmt.Errorf("push: %w", classify(err))
		for _, r := range reqs {
			if r.Err == nil {
				r.Err = err
			}
		}
		return nil, err
	}

	for i, r := range reqs {
		if r.Err != nil {
			continue
		}
		r.Results = make([]PushResult, len(r.Messages))
		for j, m := range r.Messages {
			l := where[i][j]
			if !l.seg.ok {
				r.Results = nil
				retry = append(retry, r)
				break
			}
			r.Results[j] = PushResult{Partition: m.Partition, Offset: l.seg.base + l.idx, Status: StatusStored}
		}
	}
	return retry, nil
}

// errIs reports whether err is one of the store's sentinels, which callers
// answer with a 4xx rather than a 5xx.
func errIs(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
