package store

import (
	"encoding/binary"
	"errors"
)

// A segment's payload frames its messages back to back, each as
// uvarint(len(id)) id uvarint(len(data)) data. Hand-written because it is
// the hot path's only encoding and needs neither a schema nor allocation per
// message; it is fuzzed in frame_test.go.

var errCorruptSegment = errors.New("store: corrupt segment payload")

func appendFrame(buf []byte, id string, data []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(id)))
	buf = append(buf, id...)
	buf = binary.AppendUvarint(buf, uint64(len(data)))
	return append(buf, data...)
}

func frameSize(id string, data []byte) int {
	return uvarintLen(uint64(len(id))) + len(id) + uvarintLen(uint64(len(data))) + len(data)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// readFrame decodes the frame at the start of buf and returns the rest. id and
// data alias buf.
func readFrame(buf []byte) (id, data, rest []byte, err error) {
	n, k := binary.Uvarint(buf)
	if k <= 0 || n > uint64(len(buf)-k) {
		return nil, nil, nil, errCorruptSegment
	}
	id, buf = buf[k:k+int(n)], buf[k+int(n):]
	n, k = binary.Uvarint(buf)
	if k <= 0 || n > uint64(len(buf)-k) {
		return nil, nil, nil, errCorruptSegment
	}
	return id, buf[k : k+int(n)], buf[k+int(n):], nil
}
