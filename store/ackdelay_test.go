package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// newStoreDB is newStore with a connection of its own to the store's
// schema, for tests that look at the rows.
func newStoreDB(t *testing.T) (*store.Store, *pgx.Conn) {
	t.Helper()
	url := testURL(t)
	st := openStore(t, url, store.Options{MaxConns: 8})
	conn, err := pgx.Connect(ctxT(t), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return st, conn
}

// cursorHold is what a group's cursor on a partition holds: its lease id
// and how many milliseconds from now its lease_until is (negative when
// past; 0 with no lease).
func cursorHold(t *testing.T, conn *pgx.Conn, group, partition string) (lease string, leftMS int64) {
	t.Helper()
	require.NoError(t, conn.QueryRow(ctxT(t), `
		SELECT coalesce(c.lease_id, ''), coalesce((extract(epoch FROM c.lease_until - now()) * 1000)::bigint, 0)
		FROM comb_cursors c JOIN comb_partitions p ON p.id = c.partition_id
		WHERE c.group_name = $1 AND p.name = $2`, group, partition).Scan(&lease, &leftMS))
	return lease, leftMS
}

// endHolds makes every hold of the schema elapse now, so that a test need
// not wait out long delays.
func endHolds(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	tag, err := conn.Exec(ctxT(t), `UPDATE comb_cursors SET lease_until = now() - interval '1 millisecond' WHERE lease_id LIKE 'h-%'`)
	require.NoError(t, err)
	require.Positive(t, tag.RowsAffected(), "a hold to end")
}

func popOne(t *testing.T, st *store.Store, queue, partition string) []domain.Message {
	t.Helper()
	ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global(queue), Partition: partition, Max: 1})
	require.NoError(t, err)
	return ms
}

// TestFailedAckHoldsThePartition: with retry_delay_ms, a failed message
// is held back, and its partition with it, until the delay has passed;
// the hold is no lease anyone can ack, renew or see counted.
func TestFailedAckHoldsThePartition(t *testing.T) {
	t.Parallel()
	st, conn := newStoreDB(t)
	ctx := ctxT(t)
	q := domain.Global("q")
	const delay = 300 * time.Millisecond
	configure(t, st, "q", domain.ConfigPatch{RetryDelayMS: i64(delay.Milliseconds())})
	pushN(t, st, "q", "p", 0, 2)

	ms := popOne(t, st, "q", "p")
	require.Len(t, ms, 1)
	require.Equal(t, 1, ms[0].Attempt)
	began := time.Now()
	out := ackOutcome(t, st, domain.AckParams{Queue: q, Acks: []domain.Ack{{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed}}})
	require.NoError(t, out.Err)
	require.Equal(t, []domain.AckResult{{OK: true, Retried: 1, Hold: delay}}, out.Results,
		"a hold wakes nobody now: More and Freed are unset")
	// Nothing of p is delivered before the delay, not even the message
	// behind the held one. (The hold ends at the ack's start plus the
	// delay, so a pop that returned within the delay ran before that; on
	// a machine too slow for that there is nothing to check.)
	early := popOne(t, st, "q", "p")
	if time.Since(began) < delay {
		require.Empty(t, early)
		hold, left := cursorHold(t, conn, "default", "p")
		require.Regexp(t, `^h-\d+$`, hold)
		require.LessOrEqual(t, left, delay.Milliseconds())
	}

	// Once the delay has passed the message comes back, attempt 2, and the
	// message behind it after it.
	got := early
	if len(got) == 0 {
		require.Eventually(t, func() bool {
			got = popOne(t, st, "q", "p")
			return len(got) > 0
		}, 10*time.Second, 20*time.Millisecond)
	}
	require.GreaterOrEqual(t, time.Since(began), delay, "not before the delay")
	require.Equal(t, int64(0), got[0].Offset)
	require.Equal(t, 2, got[0].Attempt)
	lease, _ := cursorHold(t, conn, "default", "p")
	require.Equal(t, got[0].Lease, lease, "a pop replaced the hold with its lease")
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: got[0].Lease})[0].OK)
	got = popOne(t, st, "q", "p")
	require.Len(t, got, 1)
	require.Equal(t, int64(1), got[0].Offset)
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 1, Lease: got[0].Lease})[0].OK)

	// A long hold, to look at: other partitions are delivered meanwhile.
	pushN(t, st, "q", "p", 2, 1)
	pushN(t, st, "q", "other", 0, 1)
	ms = popOne(t, st, "q", "p")
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease, Status: domain.AckFailed, DelayMS: i64(60000)})[0].OK)
	hold, left := cursorHold(t, conn, "default", "p")
	require.Regexp(t, `^h-\d+$`, hold)
	require.True(t, left > 30000 && left <= 60000, "held for the delay: %d ms left", left)
	ms2, err := st.Pop(ctx, domain.PopParams{Queue: q, Max: 10})
	require.NoError(t, err)
	require.Len(t, ms2, 1)
	require.Equal(t, "other", ms2[0].Partition)

	// The hold is no lease: acks and renews naming it fail, figures do not
	// count it.
	res := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 2, Lease: hold, Status: domain.AckRetry})
	require.Equal(t, []domain.AckResult{{Error: "lease expired or not held by this group"}}, res)
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 2, Lease: hold})
	require.Equal(t, []domain.AckResult{{Error: "lease expired or not held by this group"}}, res)
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease})
	require.False(t, res[0].OK, "the failed lease has ended")
	rn, err := st.Renew(ctx, domain.RenewParams{Queue: q, Leases: []string{hold}})
	require.NoError(t, err)
	require.False(t, rn[0].OK)
	groups, err := st.Groups(ctx, q)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, int64(1), groups[0].Leased, "only other's lease")
	info, err := st.Info(ctx, domain.InfoParams{Queue: q, Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Groups[0].Leased)
	figs, err := st.GroupFigures(ctx, store.GroupFiguresParams{})
	require.NoError(t, err)
	require.Len(t, figs, 1)
	require.Equal(t, int64(1), figs[0].LeasesActive)
	lease2, left := cursorHold(t, conn, "default", "p")
	require.Equal(t, hold, lease2)
	require.Positive(t, left, "still held after all that")

	// An elapsed hold is no expired lease either.
	endHolds(t, conn)
	figs, err = st.GroupFigures(ctx, store.GroupFiguresParams{})
	require.NoError(t, err)
	require.Zero(t, figs[0].LeasesExpired)
	ms = popOne(t, st, "q", "p")
	require.Equal(t, 2, ms[0].Attempt)
}

// TestRetryDelayGrowsPerAttempt: each failed attempt holds the message
// back retry_backoff_pct percent longer than the one before, up to
// retry_delay_max_ms; the last attempt dead-letters it without a hold.
func TestRetryDelayGrowsPerAttempt(t *testing.T) {
	t.Parallel()
	st, conn := newStoreDB(t)
	configure(t, st, "q", domain.ConfigPatch{MaxAttempts: i64(6), RetryDelayMS: i64(10000), RetryBackoffPct: i64(200), RetryDelayMaxMS: i64(35000)})
	pushN(t, st, "q", "p", 0, 2)
	want := []int64{10000, 20000, 35000, 35000, 35000}
	for n, d := range want {
		ms := popOne(t, st, "q", "p")
		require.Len(t, ms, 1, "attempt %d", n+1)
		require.Equal(t, n+1, ms[0].Attempt)
		res := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed})
		require.True(t, res[0].OK)
		require.Equal(t, time.Duration(d)*time.Millisecond, res[0].Hold, "attempt %d", n+1)
		hold, left := cursorHold(t, conn, "default", "p")
		require.Regexp(t, `^h-\d+$`, hold)
		require.True(t, left > d-5000 && left <= d, "attempt %d: held %d ms, want %d", n+1, left, d)
		require.Empty(t, popOne(t, st, "q", "p"), "attempt %d: held", n+1)
		endHolds(t, conn)
	}
	ms := popOne(t, st, "q", "p")
	require.Equal(t, 6, ms[0].Attempt)
	res := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed, Error: "gave up"})
	require.Equal(t, []domain.AckResult{{OK: true, Dead: true, DeadBytes: 1}}, res)
	hold, _ := cursorHold(t, conn, "default", "p")
	require.Empty(t, hold, "dead-lettered: no hold, the rest goes at once")
	ms = popOne(t, st, "q", "p")
	require.Len(t, ms, 1)
	require.Equal(t, int64(1), ms[0].Offset)
	require.Equal(t, 1, ms[0].Attempt)

	dls, _, err := st.DeadLetters(ctxT(t), domain.DLQParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, 6, dls[0].Attempts)
	require.Equal(t, "failed", dls[0].Reason)
	require.Equal(t, "gave up", dls[0].Error)
}

// TestAckDelayOverrides: an ack's delay_ms replaces the queue's retry
// delay, for failed and retry alike; retry without one redelivers at once.
func TestAckDelayOverrides(t *testing.T) {
	t.Parallel()
	st, conn := newStoreDB(t)
	configure(t, st, "q", domain.ConfigPatch{MaxAttempts: i64(10), RetryDelayMS: i64(60000)})
	pushN(t, st, "q", "p", 0, 1)
	q := domain.Global("q")

	// failed with delay_ms 0: back at once, attempt counted, pops woken.
	ms := popOne(t, st, "q", "p")
	out := ackOutcome(t, st, domain.AckParams{Queue: q, Acks: []domain.Ack{{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed, DelayMS: i64(0)}}})
	require.NoError(t, out.Err)
	require.Equal(t, []domain.AckResult{{OK: true, More: true, Freed: true, Retried: 1}}, out.Results)
	ms = popOne(t, st, "q", "p")
	require.Equal(t, 2, ms[0].Attempt)

	// retry without delay_ms: at once, whatever the queue's retry delay.
	require.Equal(t, time.Duration(0), ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckRetry})[0].Hold)
	ms = popOne(t, st, "q", "p")
	require.Len(t, ms, 1)
	require.Equal(t, 2, ms[0].Attempt, "retry spends no attempt")

	// failed with delay_ms: that long, not the queue's minute.
	res := ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed, DelayMS: i64(5000)})
	require.Equal(t, 5*time.Second, res[0].Hold)
	_, left := cursorHold(t, conn, "default", "p")
	require.True(t, left > 0 && left <= 5000, "held %d ms", left)
	endHolds(t, conn)
	ms = popOne(t, st, "q", "p")
	require.Equal(t, 3, ms[0].Attempt)

	// retry with delay_ms: held without spending an attempt.
	began := time.Now()
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckRetry, DelayMS: i64(300)})
	require.Equal(t, 300*time.Millisecond, res[0].Hold)
	if ms = popOne(t, st, "q", "p"); time.Since(began) < 300*time.Millisecond {
		require.Empty(t, ms, "held (see TestFailedAckHoldsThePartition)")
	}
	require.Eventually(t, func() bool {
		if len(ms) == 0 {
			ms = popOne(t, st, "q", "p")
		}
		return len(ms) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
	require.Equal(t, 3, ms[0].Attempt)

	// A seek ends a hold.
	res = ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed})
	require.Equal(t, time.Minute, res[0].Hold)
	_, err := st.Seek(ctxT(t), domain.SeekParams{Queue: q, Group: "default", To: domain.Start{Kind: domain.StartAll}})
	require.NoError(t, err)
	ms = popOne(t, st, "q", "p")
	require.Len(t, ms, 1, "seek released the hold")
}

// TestAckErrorKeptWithDeadLetter: a dead letter keeps the error text of
// the ack that made it, and the listing shows it.
func TestAckErrorKeptWithDeadLetter(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", domain.ConfigPatch{MaxAttempts: i64(2)})
	pushN(t, st, "q", "p", 0, 4)

	// A failed ack with attempts left keeps its text nowhere; the one that
	// spends the last attempt keeps its own.
	ms := popOne(t, st, "q", "p")
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed, Error: "first"})[0].OK)
	ms = popOne(t, st, "q", "p")
	require.True(t, ack(t, st, "q", "", domain.Ack{Partition: "p", Offset: 0, Lease: ms[0].Lease, Status: domain.AckFailed, Error: "second: é ✓"})[0].OK)

	// dead with and without a text, in one request.
	ms, err := st.Pop(ctxT(t), domain.PopParams{Queue: domain.Global("q"), Max: 3})
	require.NoError(t, err)
	require.Len(t, ms, 3)
	res := ack(t, st, "q", "",
		domain.Ack{Partition: "p", Offset: 1, Lease: ms[0].Lease, Status: domain.AckDead, Error: "bad schema"},
		domain.Ack{Partition: "p", Offset: 2, Lease: ms[0].Lease, Status: domain.AckDead},
		domain.Ack{Partition: "p", Offset: 3, Lease: ms[0].Lease})
	for _, r := range res {
		require.True(t, r.OK)
	}

	dls, _, err := st.DeadLetters(ctxT(t), domain.DLQParams{Queue: domain.Global("q")})
	require.NoError(t, err)
	var got []string
	for _, d := range dls {
		got = append(got, strconv.FormatInt(d.Offset, 10)+" "+d.Reason+" "+d.Error)
	}
	require.Equal(t, []string{"0 failed second: é ✓", "1 dead bad schema", "2 dead "}, got)
}
