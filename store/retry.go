package store

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
)

// withRetry runs fn again when PostgreSQL aborted it for a deadlock or a
// serialization failure, which heal on their own; every other error is
// final. Lock ordering makes deadlocks rare, not impossible (a renew and an
// ack batch may name the same cursors).
func (s *Store) withRetry(ctx context.Context, fn func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 5 * time.Millisecond
	b.MaxInterval = 200 * time.Millisecond
	b.MaxElapsedTime = 5 * time.Second
	return backoff.Retry(func() error {
		err := fn()
		var pgErr *pgconn.PgError
		if err == nil || (errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")) {
			return err
		}
		return backoff.Permanent(err)
	}, backoff.WithContext(b, ctx))
}
