package spool

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

func push(queue string, parts ...string) domain.PushParams {
	p := domain.PushParams{Queue: domain.QueueRef{Tenant: "t", Name: queue}}
	for i, part := range parts {
		p.Messages = append(p.Messages, domain.PushMessage{Partition: part, ID: fmt.Sprintf("id-%d", i),
			Data: []byte(fmt.Sprintf(`"%s-%d"`, queue, i)), Encoding: domain.EncodingJSON})
	}
	return p
}

func open(t *testing.T, dir string, max int64) *Spool {
	t.Helper()
	s, err := Open(dir, Options{MaxBytes: max})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// drainAll reads and commits everything, returning the records in order.
func drainAll(t *testing.T, s *Spool) []Record {
	t.Helper()
	var out []Record
	for range 10000 {
		b, err := s.Next(3, 1<<20)
		require.NoError(t, err)
		if b == nil {
			return out
		}
		require.Equal(t, b.Prev+int64(len(b.Records)), b.Last)
		out = append(out, b.Records...)
		require.NoError(t, s.Commit(b))
	}
	t.Fatal("the spool never emptied")
	return nil
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	r := Record{Seq: 7, Time: time.Unix(0, 1234567890123), Push: push("q", "a", "b")}
	r.Push.Messages[1].Encoding = domain.EncodingBinary
	r.Push.Messages[1].Data = []byte{0, 1, 2, 0xff}
	r.Push.Messages[0].Headers = domain.Headers(`{"traceparent":["00-ab-cd-01"]}`)
	r.Push.Messages[0].DelayMS = 1500
	r.Push.Messages[1].NotBefore = time.Unix(0, 1764583200123456789)
	b := AppendRecord([]byte("junk"), &r)[4:]
	got, n, err := DecodeRecord(b)
	require.NoError(t, err)
	require.Equal(t, len(b), n)
	require.Equal(t, r.Seq, got.Seq)
	require.True(t, r.Time.Equal(got.Time))
	require.Equal(t, r.Push, got.Push)

	for cut := range len(b) {
		_, _, err := DecodeRecord(b[:cut])
		require.ErrorIs(t, err, ErrShort, "cut at %d", cut)
	}
	for i := range len(b) {
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		_, _, err := DecodeRecord(bad)
		require.Error(t, err, "flip at %d", i)
	}
}

func FuzzSpoolRecord(f *testing.F) {
	r := Record{Seq: 1, Time: time.Unix(1, 2), Push: push("q", "a", "b", "a")}
	f.Add(AppendRecord(nil, &r))
	r.Push.Messages[1].Headers, r.Push.Messages[1].DelayMS = domain.Headers(`{"a":["b"]}`), 5
	r.Push.Messages[2].NotBefore = time.Unix(0, 99)
	f.Add(AppendRecord(nil, &r))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(bytes.Repeat([]byte{0xff}, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, n, err := DecodeRecord(b)
		if err != nil {
			require.Zero(t, n+len(got.Push.Messages))
			return
		}
		require.LessOrEqual(t, n, len(b))
		require.Positive(t, got.Seq)
		// A record that decodes encodes back to the same frame.
		require.Equal(t, b[:n], AppendRecord(nil, &got))
	})
}

func TestAppendDrainInOrder(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), 1<<20)
	require.True(t, s.Empty())
	require.NotEmpty(t, s.ID())
	p1, p2, p3 := push("q", "a"), push("q", "b", "b"), push("r", "a")
	n, err := s.Append([]domain.PushParams{p1, p2})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.Append([]domain.PushParams{p3})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	require.True(t, s.Pending(&p1))
	require.False(t, s.Pending(&domain.PushParams{Queue: p1.Queue, Messages: []domain.PushMessage{{Partition: "c"}}}))
	require.False(t, s.Pending(&domain.PushParams{Queue: domain.QueueRef{Name: "q"}, Messages: p1.Messages}), "another tenant's queue")
	st := s.Stats()
	require.EqualValues(t, 3, st.Records)
	require.EqualValues(t, 4, st.Messages)
	require.False(t, st.Oldest.IsZero())

	recs := drainAll(t, s)
	require.Len(t, recs, 3)
	require.Equal(t, []domain.PushParams{p1, p2, p3}, []domain.PushParams{recs[0].Push, recs[1].Push, recs[2].Push})
	st = s.Stats()
	require.Zero(t, st.Records)
	require.Zero(t, st.Bytes, "the drained file is gone")
	require.EqualValues(t, 4, st.Drained)
	require.False(t, s.Pending(&p1))
	require.Empty(t, s.Files())
}

func TestReopenKeepsWhatWasNotCommitted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 1 << 20, FileBytes: 200})
	require.NoError(t, err)
	var want []domain.PushParams
	for i := range 20 {
		p := push(fmt.Sprintf("q%d", i), "a")
		want = append(want, p)
		_, err := s.Append([]domain.PushParams{p})
		require.NoError(t, err)
	}
	require.Greater(t, len(s.Files()), 2, "FileBytes rotates files")
	b, err := s.Next(5, 1<<20)
	require.NoError(t, err)
	require.NoError(t, s.Commit(b))

	// A second process may not open it while the first holds it.
	_, err = Open(dir, Options{MaxBytes: 1 << 20})
	require.ErrorContains(t, err, "in use")
	id := s.ID()
	require.NoError(t, s.Close())

	s = open(t, dir, 1<<20)
	require.Equal(t, id, s.ID(), "a directory keeps its id")
	recs := drainAll(t, s)
	// The reopened spool starts at its oldest file: records of a file
	// partly committed come again (the store's mark skips them).
	var got []domain.PushParams
	for _, r := range recs {
		got = append(got, r.Push)
	}
	require.Equal(t, want[len(want)-len(got):], got)
	require.GreaterOrEqual(t, len(got), 20-len(b.Records))
}

func TestTornTailIsTruncated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 1 << 20})
	require.NoError(t, err)
	for i := range 3 {
		_, err := s.Append([]domain.PushParams{push(fmt.Sprintf("q%d", i), "a")})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	files, err := filepath.Glob(filepath.Join(dir, "*.spool"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	info, err := os.Stat(files[0])
	require.NoError(t, err)

	// A crash mid-write: half a record at the end.
	half := AppendRecord(nil, &Record{Seq: 4, Time: time.Now(), Push: push("torn", "a")})
	fh, err := os.OpenFile(files[0], os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fh.Write(half[:len(half)/2])
	require.NoError(t, err)
	require.NoError(t, fh.Close())

	s = open(t, dir, 1<<20)
	after, err := os.Stat(files[0])
	require.NoError(t, err)
	require.Equal(t, info.Size(), after.Size(), "the torn tail is cut off")
	require.EqualValues(t, 3, s.Stats().Records)
	// Appends go on after the good records.
	_, err = s.Append([]domain.PushParams{push("q3", "a")})
	require.NoError(t, err)
	recs := drainAll(t, s)
	require.Len(t, recs, 4)
	require.Equal(t, "q3", recs[3].Push.Queue.Name)
	require.EqualValues(t, 4, recs[3].Seq)
}

func TestCorruptRecordCutsTheRest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 1 << 20})
	require.NoError(t, err)
	_, err = s.Append([]domain.PushParams{push("q0", "a"), push("q1", "a"), push("q2", "a")})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	files, _ := filepath.Glob(filepath.Join(dir, "*.spool"))
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	_, n, err := DecodeRecord(b)
	require.NoError(t, err)
	b[n+headerBytes+3] ^= 1 // inside the second record's payload
	require.NoError(t, os.WriteFile(files[0], b, 0o600))

	s = open(t, dir, 1<<20)
	recs := drainAll(t, s)
	require.Len(t, recs, 1)
	require.Equal(t, "q0", recs[0].Push.Queue.Name)
}

func TestFullRefusesWhatDoesNotFit(t *testing.T) {
	t.Parallel()
	one := int64(len(AppendRecord(nil, &Record{Seq: 1, Time: time.Now(), Push: push("q", "a")})))
	s := open(t, t.TempDir(), 3*one+one/2)
	n, err := s.Append([]domain.PushParams{push("q", "a"), push("q", "a")})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.Append([]domain.PushParams{push("q", "a"), push("q", "a")})
	require.ErrorIs(t, err, ErrFull)
	require.Equal(t, 1, n, "in order, up to the bound")
	n, err = s.Append([]domain.PushParams{push("q", "a")})
	require.ErrorIs(t, err, ErrFull)
	require.Zero(t, n)
	require.LessOrEqual(t, s.Stats().Bytes, s.Stats().MaxBytes)
	require.Len(t, drainAll(t, s), 3)
	// Drained, the room is back.
	n, err = s.Append([]domain.PushParams{push("q", "a")})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestCommitOutOfOrderIsRefused(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), 1<<20)
	_, err := s.Append([]domain.PushParams{push("q", "a"), push("q", "a")})
	require.NoError(t, err)
	b, err := s.Next(1, 1<<20)
	require.NoError(t, err)
	require.NoError(t, s.Commit(b))
	require.ErrorContains(t, s.Commit(b), "out of order")
}

func TestOpenRefusesNoBound(t *testing.T) {
	t.Parallel()
	_, err := Open(t.TempDir(), Options{})
	require.ErrorContains(t, err, "must be positive")
}
