package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// An ack commits without waiting for the WAL flush unless DurableAcks:
// both the acks that share a statement and a request applied in order
// (a retry). The acks of a comb.txn commit durably with its pushes
// whatever the option says. A trigger on the cursors records the
// synchronous_commit each statement that moves them runs under, so the
// test reads what PostgreSQL was told, not what the store meant to say.
func TestAcksCommitAsynchronouslyUnlessDurable(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	ctx := ctxT(t)
	def, durable := openStore(t, url, store.Options{MaxConns: 4}), openStore(t, url, store.Options{MaxConns: 4, DurableAcks: true})
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	_, err = conn.Exec(ctx, `
		CREATE TABLE ack_commits (sync text NOT NULL);
		CREATE FUNCTION note_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    INSERT INTO ack_commits VALUES (current_setting('synchronous_commit'));
		    RETURN NULL;
		END $$;
		CREATE TRIGGER note_commit AFTER UPDATE ON comb_cursors
		    FOR EACH STATEMENT EXECUTE FUNCTION note_commit();`)
	require.NoError(t, err)

	// settings acks one leased message of a queue of its own with do and
	// returns the synchronous_commit of every statement that moved a
	// cursor meanwhile.
	n := 0
	settings := func(st *store.Store, status domain.AckStatus, do func(q string, a domain.Ack)) []string {
		t.Helper()
		n++
		q := "q" + string(rune('a'+n))
		pushN(t, st, q, "p", 0, 1)
		ms, err := st.Pop(ctx, domain.PopParams{Queue: domain.Global(q), Group: "g", Max: 1})
		require.NoError(t, err)
		require.Len(t, ms, 1)
		_, err = conn.Exec(ctx, `TRUNCATE ack_commits`)
		require.NoError(t, err)
		do(q, domain.Ack{Partition: "p", Offset: ms[0].Offset, Lease: ms[0].Lease, Status: status})
		rows, err := conn.Query(ctx, `SELECT sync FROM ack_commits`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return got
	}
	ackWith := func(st *store.Store) func(q string, a domain.Ack) {
		return func(q string, a domain.Ack) {
			res := ack(t, st, q, "g", a)
			require.True(t, res[0].OK, "%+v", res[0])
		}
	}
	inTxn := func(st *store.Store) func(q string, a domain.Ack) {
		return func(q string, a domain.Ack) {
			res, err := st.Txn(ctx, domain.TxnParams{
				Acks: []domain.TxnAck{{Queue: domain.Global(q), Group: "g", Ack: a}},
				Push: []domain.PushParams{{Queue: domain.Global(q + "-out"), Messages: []domain.PushMessage{msg("p", "", "1")}}},
			})
			require.NoError(t, err)
			require.True(t, res.Acks[0].OK)
		}
	}
	for _, c := range []struct {
		name   string
		st     *store.Store
		status domain.AckStatus
		do     func(*store.Store) func(string, domain.Ack)
		want   string
	}{
		{"completed", def, domain.AckCompleted, ackWith, "off"},
		{"retry, in order", def, domain.AckRetry, ackWith, "off"},
		{"in a transaction", def, domain.AckCompleted, inTxn, "on"},
		{"completed, durable", durable, domain.AckCompleted, ackWith, "on"},
		{"retry, in order, durable", durable, domain.AckRetry, ackWith, "on"},
	} {
		got := settings(c.st, c.status, c.do(c.st))
		require.NotEmpty(t, got, "%s: the ack moved a cursor", c.name)
		for _, s := range got {
			require.Equal(t, c.want, s, "%s: %q", c.name, got)
		}
	}
}
