package store

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// splitElems cuts data into elements at the lengths its leading bytes
// give, so that a fuzzer reaches empty, small and large elements alike.
func splitElems(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := int(data[0]) * int(data[0]) // 0..65025
		data = data[1:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func encodeBoth(t testing.TB, elems [][]byte) (want, got []byte) {
	plain := pgtype.NewMap()
	want, err := plain.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, elems, nil)
	require.NoError(t, err)
	ours := pgtype.NewMap()
	registerEncoders(ours)
	got, err = ours.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, byteaArray(elems), make([]byte, 0, 256))
	require.NoError(t, err)
	return want, got
}

func TestByteaArrayEncodesAsPgx(t *testing.T) {
	for _, elems := range [][][]byte{
		nil,
		{},
		{{}},
		{[]byte("a")},
		{[]byte("one"), {}, make([]byte, 100_000), []byte("last")},
	} {
		want, got := encodeBoth(t, elems)
		require.Equal(t, want, got)
		if len(elems) > 0 {
			// The room made is exactly what the encoding takes.
			require.Equal(t, byteaArray(elems).binaryLen(), len(got))
		}
	}
}

func FuzzByteaArrayEncode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{2, 'a', 'b', 'c', 'd', 1, 'e'})
	f.Fuzz(func(t *testing.T, data []byte) {
		elems := splitElems(data)
		want, got := encodeBoth(t, elems)
		require.Equal(t, want, got)
	})
}

// BenchmarkByteaArrayEncode encodes a reference push transaction's
// payloads (200 segments of 20 KB) into pgx's 256-byte starting buffer.
func BenchmarkByteaArrayEncode(b *testing.B) {
	elems := make([][]byte, 200)
	for i := range elems {
		elems[i] = make([]byte, 20_000)
	}
	for _, bc := range []struct {
		name  string
		value any
		m     *pgtype.Map
	}{
		{"pgx", elems, pgtype.NewMap()},
		{"presized", byteaArray(elems), func() *pgtype.Map { m := pgtype.NewMap(); registerEncoders(m); return m }()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.m.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, bc.value, make([]byte, 0, 256)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
