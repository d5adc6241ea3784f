package store

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var buf []byte
	ids := []string{"", "order-7", string(make([]byte, 300))}
	datas := [][]byte{{}, []byte(`{"sku":42}`), bytes.Repeat([]byte{0xff}, 1000)}
	for i := range ids {
		before := len(buf)
		buf = appendFrame(buf, ids[i], datas[i])
		require.Equal(t, frameSize(ids[i], datas[i]), len(buf)-before)
	}
	rest := buf
	for i := range ids {
		id, data, r, err := readFrame(rest)
		require.NoError(t, err)
		require.Equal(t, ids[i], string(id))
		require.Equal(t, datas[i], data)
		rest = r
	}
	require.Empty(t, rest)
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{})
	f.Add(appendFrame(nil, "id", []byte("data")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		rest := b
		for len(rest) > 0 {
			id, data, r, err := readFrame(rest)
			if err != nil {
				return
			}
			// Whatever decodes must survive a re-encoding unchanged.
			again := appendFrame(nil, string(id), data)
			id2, data2, r2, err := readFrame(again)
			require.NoError(t, err)
			require.Equal(t, id, id2)
			require.Equal(t, data, data2)
			require.Empty(t, r2)
			require.Less(t, len(r), len(rest))
			rest = r
		}
	})
}
