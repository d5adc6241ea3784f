package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// DefaultPostgresStartWait is how long `comb serve` waits at start for a
// PostgreSQL that does not answer: long enough for a database started
// beside it (docker compose, a host's boot) or a Patroni failover, short
// enough that a wrong host fails the start within minutes.
const DefaultPostgresStartWait = 2 * time.Minute

// pgAttemptTimeout bounds one attempt to reach PostgreSQL at start, so a
// host that drops packets (rather than refusing) costs one attempt, not
// the whole wait; a URL's connect_timeout shortens it further.
const pgAttemptTimeout = 10 * time.Second

// migrateWaiting runs the store's migrations once PostgreSQL answers. An
// unreachable PostgreSQL (refused, timed out, shutting down, starting up,
// or only read-only hosts for target_session_attrs=read-write) is tried
// again with exponential backoff for up to Postgres.StartWait, each failed
// attempt logged; an error that waiting will not heal (a wrong password, a
// missing database, a failed migration) ends the start at once, and so
// does ctx, which a signal cancels.
//
// Waiting, not failing fast, because an orchestrator that restarts a
// failed process does the same thing slower and with a crash loop in its
// log, and a supervisor without restarts (a plain systemd unit, compose
// without restart:) would leave Comb down after PostgreSQL came back.
func (b *Broker) migrateWaiting(ctx context.Context, st *store.Store) error {
	wait := b.cfg.Postgres.StartWait
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 250 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = wait
	var policy backoff.BackOff = bo
	if wait == 0 {
		policy = &backoff.StopBackOff{}
	}
	start := time.Now()
	attempt := 0
	err := backoff.RetryNotify(func() error {
		attempt++
		actx, cancel := context.WithTimeout(ctx, pgAttemptTimeout)
		err := st.Ping(actx)
		cancel()
		if err == nil {
			// Migrations run under ctx alone: a long one is no outage.
			err = st.Migrate(ctx)
		}
		if err == nil || ctx.Err() != nil || !waitable(err) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(policy, ctx), func(err error, next time.Duration) {
		b.log.Warn("postgresql unreachable, retrying", "attempt", attempt, "retry_in", next.Round(time.Millisecond),
			"waited", time.Since(start).Round(time.Millisecond), "wait_up_to", wait, "err", err)
	})
	switch {
	case err == nil:
		if attempt > 1 {
			b.log.Info("postgresql reachable", "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
		}
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for postgresql: %w (after %d attempts: %w)", ctx.Err(), attempt, err)
	case waitable(err):
		return fmt.Errorf("postgresql unreachable for %s (%d attempts; -pg-start-wait sets how long to wait): %w",
			time.Since(start).Round(time.Millisecond), attempt, err)
	}
	return err
}

// waitable reports whether err means PostgreSQL cannot be reached now but
// may be soon. The store reports a failed connection as unavailable even
// when the server answered with a refusal of its own, such as a wrong
// password or a missing database: those are not waited for.
func waitable(err error) bool {
	if !errors.Is(err, domain.ErrUnavailable) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P: shutting down or
		// starting up; 53: out of resources (too many connections).
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") ||
			strings.HasPrefix(pgErr.Code, "53")
	}
	return true
}
