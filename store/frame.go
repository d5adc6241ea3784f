package store

import (
	"encoding/binary"
	"errors"

	"github.com/combmq/comb/domain"
)

// A segment's payload frames its messages back to back, each as
// uvarint(len(id)) id uvarint(len(data)<<2 | encoding) data. The two low
// bits of the data length record the message's domain.Encoding, known at
// push time, so that a pop need not look at the bytes to write its reply.
// Segments written before encodings were recorded (frame format 0) hold
// plain lengths; their messages read back as domain.EncodingUnknown.
//
// Hand-written because it is the hot path's only encoding and needs
// neither a schema nor allocation per message; it is fuzzed in
// frame_test.go.

// Frame formats, in comb_segments.frame_format.
const (
	framesPlain   = 0 // before migration 0004: no encodings
	framesEncoded = 1
)

var errCorruptSegment = errors.New("store: corrupt segment payload")

func appendFrame(buf []byte, id string, data []byte, enc domain.Encoding) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(id)))
	buf = append(buf, id...)
	buf = binary.AppendUvarint(buf, uint64(len(data))<<2|uint64(enc&3))
	return append(buf, data...)
}

// readFrame decodes the frame at the start of buf, written in format, and
// returns the rest. id and data alias buf.
func readFrame(buf []byte, format int16) (id, data []byte, enc domain.Encoding, rest []byte, err error) {
	n, k := binary.Uvarint(buf)
	if k <= 0 || n > uint64(len(buf)-k) {
		return nil, nil, 0, nil, errCorruptSegment
	}
	id, buf = buf[k:k+int(n)], buf[k+int(n):]
	n, k = binary.Uvarint(buf)
	if k <= 0 {
		return nil, nil, 0, nil, errCorruptSegment
	}
	if format == framesEncoded {
		enc, n = domain.Encoding(n&3), n>>2
	}
	if n > uint64(len(buf)-k) {
		return nil, nil, 0, nil, errCorruptSegment
	}
	return id, buf[k : k+int(n)], enc, buf[k+int(n):], nil
}
