package store

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
)

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var buf []byte
	ids := []string{"", "order-7", string(make([]byte, 300))}
	datas := [][]byte{{}, []byte(`{"sku":42}`), bytes.Repeat([]byte{0xff}, 1000)}
	encs := []domain.Encoding{domain.EncodingBinary, domain.EncodingJSON, domain.EncodingUnknown}
	for i := range ids {
		buf = appendFrame(buf, ids[i], datas[i], encs[i])
	}
	rest := buf
	for i := range ids {
		id, data, enc, r, err := readFrame(rest, framesEncoded)
		require.NoError(t, err)
		require.Equal(t, ids[i], string(id))
		require.Equal(t, datas[i], data)
		require.Equal(t, encs[i], enc)
		rest = r
	}
	require.Empty(t, rest)
}

// A segment written before migration 0004 holds plain lengths: it reads
// back byte for byte, with the encoding unknown.
func TestPlainFramesReadAsUnknown(t *testing.T) {
	t.Parallel()
	plain := func(buf []byte, id string, data []byte) []byte {
		buf = binary.AppendUvarint(buf, uint64(len(id)))
		buf = append(buf, id...)
		buf = binary.AppendUvarint(buf, uint64(len(data)))
		return append(buf, data...)
	}
	buf := plain(plain(nil, "a", []byte(`{"x":1}`)), "", []byte{0, 1, 2})
	id, data, enc, rest, err := readFrame(buf, framesPlain)
	require.NoError(t, err)
	require.Equal(t, "a", string(id))
	require.Equal(t, `{"x":1}`, string(data))
	require.Equal(t, domain.EncodingUnknown, enc)
	id, data, enc, rest, err = readFrame(rest, framesPlain)
	require.NoError(t, err)
	require.Empty(t, id)
	require.Equal(t, []byte{0, 1, 2}, data)
	require.Equal(t, domain.EncodingUnknown, enc)
	require.Empty(t, rest)
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(appendFrame(nil, "id", []byte("data"), domain.EncodingJSON), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, true)
	f.Fuzz(func(t *testing.T, b []byte, encoded bool) {
		format := int16(framesPlain)
		if encoded {
			format = framesEncoded
		}
		rest := b
		for len(rest) > 0 {
			id, data, enc, r, err := readFrame(rest, format)
			if err != nil {
				return
			}
			// Whatever decodes must survive a re-encoding unchanged.
			again := appendFrame(nil, string(id), data, enc)
			id2, data2, enc2, r2, err := readFrame(again, framesEncoded)
			require.NoError(t, err)
			require.Equal(t, id, id2)
			require.Equal(t, data, data2)
			require.Equal(t, enc, enc2)
			require.Empty(t, r2)
			require.Less(t, len(r), len(rest))
			rest = r
		}
	})
}
