package store

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

// segmentsOf cuts data into segments of messages, each message's id,
// encoding, headers and data taken from data's bytes in turn, so that a
// fuzzer reaches empty, small and large ones alike. A segment ends
// where a message's first byte is 0.
func segmentsOf(data []byte) segmentPayloads {
	take := func(n int) []byte {
		n = min(n, len(data))
		out := data[:n]
		data = data[n:]
		return out
	}
	var a segmentPayloads
	seg := &segmentBuf{}
	for len(data) > 0 {
		head := take(1)[0]
		if head == 0 {
			a = append(a, seg)
			seg = &segmentBuf{}
			continue
		}
		m := &domain.PushMessage{
			ID:       string(take(int(head % 8))),
			Encoding: domain.Encoding(head % 3),
			Data:     take(int(head) * int(head)),
		}
		if head%5 == 0 {
			m.Headers = take(int(head % 16))
		}
		seg.msgs = append(seg.msgs, m)
		seg.size += frameLen(m.ID, m.Data, m.Headers)
	}
	return append(a, seg)
}

// encodeBoth encodes a in format as pgx encodes its payloads built, and
// as the store does.
func encodeBoth(t testing.TB, a segmentPayloads, format int16) (want, got []byte) {
	plain := pgtype.NewMap()
	want, err := plain.Encode(pgtype.ByteaArrayOID, format, a.frames(), nil)
	require.NoError(t, err)
	ours := pgtype.NewMap()
	registerEncoders(ours)
	got, err = ours.Encode(pgtype.ByteaArrayOID, format, a, make([]byte, 0, 256))
	require.NoError(t, err)
	return want, got
}

// TestSegmentPayloadsEncodeAsPgx: the payloads framed straight into the
// parameter buffer are pgx's encoding of the payloads built, in both
// formats, and each payload frames its messages as a segment is read.
func TestSegmentPayloadsEncodeAsPgx(t *testing.T) {
	big := make([]byte, 100_000)
	for i, a := range []segmentPayloads{
		{}, // (a nil one pgx sends as NULL before any plan sees it)
		{{}},
		segmentsOf([]byte{1, 'a'}),
		segmentsOf([]byte{2, 'a', 'b', 'c', 'd', 0, 5, 'h', 'i', 'j', 'k', 'l', 0, 0}),
		segmentsOf(append([]byte{255}, big...)),
	} {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, got := encodeBoth(t, a, format)
			require.Equal(t, want, got, "case %d, format %d", i, format)
			if format == pgtype.BinaryFormatCode && len(a) > 0 {
				// The room made is exactly what the encoding takes.
				require.Equal(t, a.binaryLen(), len(got))
			}
		}
		for i, payload := range a.frames() {
			require.Len(t, payload, a[i].size)
			for _, m := range a[i].msgs {
				f, rest, err := readFrame(payload, framesHeaders)
				require.NoError(t, err)
				require.Equal(t, m.ID, string(f.id))
				require.Equal(t, m.Encoding, f.enc)
				require.Equal(t, string(m.Data), string(f.data))
				require.Equal(t, string(m.Headers), string(f.headers))
				payload = rest
			}
			require.Empty(t, payload)
		}
	}
}

func FuzzSegmentPayloads(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{2, 'a', 'b', 'c', 'd', 0, 5, 'e'})
	f.Fuzz(func(t *testing.T, data []byte) {
		a := segmentsOf(data)
		want, got := encodeBoth(t, a, pgtype.BinaryFormatCode)
		require.Equal(t, want, got)
		require.Equal(t, a.binaryLen(), len(got))
	})
}
