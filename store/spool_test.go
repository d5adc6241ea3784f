package store_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

func spooled(queue string, from, n int, id bool) domain.PushParams {
	r := domain.PushParams{Queue: domain.Global(queue)}
	for i := from; i < from+n; i++ {
		m := domain.PushMessage{Partition: "p", Data: []byte(strconv.Itoa(i)), Encoding: domain.EncodingJSON}
		if id {
			m.ID = "id-" + strconv.Itoa(i)
		}
		r.Messages = append(r.Messages, m)
	}
	return r
}

// TestPushSpooledMovesItsMarkOnce: a drain batch stores its records and
// moves its file's mark in one transaction; the same batch again (a drain
// that crashed before it could note the commit) stores nothing.
func TestPushSpooledMovesItsMarkOnce(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	mark, err := st.SpoolMark(ctx, "f1")
	require.NoError(t, err)
	require.Zero(t, mark)

	b := store.SpoolBatch{Spool: "s", File: "f1", Prev: 0, Last: 2,
		Pushes: []domain.PushParams{spooled("sq", 0, 3, false), spooled("sq", 3, 2, false)}}
	outs, err := st.PushSpooled(ctx, b)
	require.NoError(t, err)
	require.Len(t, outs, 2)
	require.EqualValues(t, 3, outs[1].Results[0].Offset, "in order")
	mark, err = st.SpoolMark(ctx, "f1")
	require.NoError(t, err)
	require.EqualValues(t, 2, mark)

	_, err = st.PushSpooled(ctx, b)
	require.ErrorIs(t, err, store.ErrSpoolMarkMoved)
	_, err = st.PushSpooled(ctx, store.SpoolBatch{Spool: "s", File: "f1", Prev: 1, Last: 3, Pushes: []domain.PushParams{spooled("sq", 9, 1, false)}})
	require.ErrorIs(t, err, store.ErrSpoolMarkMoved)
	require.Equal(t, []int64{5}, pushN(t, st, "sq", "p", 5, 1), "nothing was stored twice")

	outs, err = st.PushSpooled(ctx, store.SpoolBatch{Spool: "s", File: "f1", Prev: 2, Last: 3, Pushes: []domain.PushParams{spooled("sq", 6, 1, false)}})
	require.NoError(t, err)
	require.EqualValues(t, 6, outs[0].Results[0].Offset)

	// Once the spool has deleted the file, its mark goes.
	require.NoError(t, st.ForgetSpoolFiles(ctx, "s", []string{"other"}))
	mark, err = st.SpoolMark(ctx, "f1")
	require.NoError(t, err)
	require.Zero(t, mark)
}

// TestPushSpooledSkipsLimitsKeepsDedup: accepted messages are not lost to
// a queue's limits at the drain, and producer ids still deduplicate.
func TestPushSpooledSkipsLimitsKeepsDedup(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := ctxT(t)
	_, err := st.Configure(ctx, domain.Global("lim"), domain.ConfigPatch{MaxMessages: i64(2), DedupWindowS: i64(600), MaxMessageBytes: i64(1)})
	require.NoError(t, err)
	outs, err := st.PushSpooled(ctx, store.SpoolBatch{Spool: "s", File: "f2", Prev: 0, Last: 2,
		Pushes: []domain.PushParams{spooled("lim", 10, 3, true), spooled("lim", 11, 1, true)}})
	require.NoError(t, err)
	require.NoError(t, outs[0].Err)
	require.Len(t, outs[0].Results, 3)
	require.Equal(t, domain.Duplicate, outs[1].Results[0].Status)
	require.Equal(t, outs[0].Results[1].Offset, outs[1].Results[0].Offset)
	// An ordinary push still meets the limit.
	out := push(t, st, spooled("lim", 20, 1, false))[0]
	require.ErrorIs(t, out.Err, domain.ErrTooLarge)
}
