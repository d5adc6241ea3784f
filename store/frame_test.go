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
	ids := []string{"", "order-7", string(make([]byte, 300)), "h"}
	datas := [][]byte{{}, []byte(`{"sku":42}`), bytes.Repeat([]byte{0xff}, 1000), []byte("x")}
	encs := []domain.Encoding{domain.EncodingBinary, domain.EncodingJSON, domain.EncodingUnknown, domain.EncodingBinary}
	hdrs := []domain.Headers{nil, domain.Headers(`{"traceparent":["00-ab-cd-01"]}`), nil, domain.Headers(`{"X":["` + string(bytes.Repeat([]byte("v"), 200)) + `"]}`)}
	for i := range ids {
		before := len(buf)
		buf = appendFrame(buf, ids[i], datas[i], encs[i], hdrs[i])
		require.Equal(t, frameLen(ids[i], datas[i], hdrs[i]), len(buf)-before, "frameLen of frame %d", i)
	}
	rest := buf
	for i := range ids {
		f, r, err := readFrame(rest, framesHeaders)
		require.NoError(t, err)
		require.Equal(t, ids[i], string(f.id))
		require.Equal(t, datas[i], f.data)
		require.Equal(t, encs[i], f.enc)
		require.Equal(t, hdrs[i], f.headers)
		rest = r
	}
	require.Empty(t, rest)
}

// Segments written before headers (format 1) and before encodings (format
// 0) read back byte for byte: the encoding known or unknown, no headers.
func TestOlderFramesRead(t *testing.T) {
	t.Parallel()
	older := func(buf []byte, id string, data []byte, lenField uint64) []byte {
		buf = binary.AppendUvarint(buf, uint64(len(id)))
		buf = append(buf, id...)
		buf = binary.AppendUvarint(buf, lenField)
		return append(buf, data...)
	}
	buf := older(older(nil, "a", []byte(`{"x":1}`), 7), "", []byte{0, 1, 2}, 3)
	f, rest, err := readFrame(buf, framesPlain)
	require.NoError(t, err)
	require.Equal(t, "a", string(f.id))
	require.Equal(t, `{"x":1}`, string(f.data))
	require.Equal(t, domain.EncodingUnknown, f.enc)
	f, rest, err = readFrame(rest, framesPlain)
	require.NoError(t, err)
	require.Empty(t, f.id)
	require.Equal(t, []byte{0, 1, 2}, f.data)
	require.Equal(t, domain.EncodingUnknown, f.enc)
	require.Empty(t, rest)

	// Format 1: length<<2 | encoding; a set third bit is part of the length.
	buf = older(nil, "b", []byte("abcd"), 4<<2|uint64(domain.EncodingBinary))
	f, rest, err = readFrame(buf, framesEncoded)
	require.NoError(t, err)
	require.Equal(t, "abcd", string(f.data))
	require.Equal(t, domain.EncodingBinary, f.enc)
	require.Nil(t, f.headers)
	require.Empty(t, rest)
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add(appendFrame(nil, "id", []byte("data"), domain.EncodingJSON, nil), uint8(1))
	f.Add(appendFrame(nil, "id", []byte("data"), domain.EncodingJSON, domain.Headers(`{"a":["b"]}`)), uint8(2))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, format uint8) {
		format %= 3
		rest := b
		for len(rest) > 0 {
			fr, r, err := readFrame(rest, int16(format))
			if err != nil {
				return
			}
			// Whatever decodes must survive a re-encoding unchanged.
			again := appendFrame(nil, string(fr.id), fr.data, fr.enc, fr.headers)
			require.Len(t, again, frameLen(string(fr.id), fr.data, fr.headers), "frameLen")
			fr2, r2, err := readFrame(again, framesHeaders)
			require.NoError(t, err)
			require.Equal(t, fr.id, fr2.id)
			require.Equal(t, fr.data, fr2.data)
			require.Equal(t, fr.enc, fr2.enc)
			require.Equal(t, fr.headers, fr2.headers)
			require.Empty(t, r2)
			require.Less(t, len(r), len(rest))
			rest = r
		}
	})
}
