package store_test

import (
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// TestClassifyOutcome: a connection that broke after the request went out
// is unavailable with its outcome unknown (a commit may have happened, so
// the bridge must not spool it); a server that said it did not do it, or
// refused the connection, is unavailable with a known outcome.
func TestClassifyOutcome(t *testing.T) {
	for _, err := range []error{io.ErrUnexpectedEOF, fmt.Errorf("read: %w", syscall.ECONNRESET), io.EOF} {
		got := store.Classify(err)
		require.ErrorIs(t, got, domain.ErrUnavailable, "%v", err)
		require.ErrorIs(t, got, domain.ErrOutcomeUnknown, "%v", err)
	}
	for _, err := range []error{
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Code: "08006", Message: "connection failure"},
	} {
		got := store.Classify(err)
		require.ErrorIs(t, got, domain.ErrUnavailable, "%v", err)
		require.NotErrorIs(t, got, domain.ErrOutcomeUnknown, "%v", err)
	}
}
