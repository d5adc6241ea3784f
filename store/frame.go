package store

import (
	"encoding/binary"
	"errors"

	"github.com/combmq/comb/domain"
)

// A segment's payload frames its messages back to back. Frame format 2,
// written since message headers exist:
//
//	uvarint(len(id)) id uvarint(len(data)<<3 | hasHeaders<<2 | encoding)
//	[uvarint(len(headers)) headers] data
//
// The low bits of the data length record the message's domain.Encoding,
// known at push time, so that a pop need not look at the bytes to write its
// reply, and whether headers (domain.Headers, stored in their reply form)
// come before the data. Older segments keep the format they were written
// in: format 1 has no header bit (uvarint(len(data)<<2 | encoding)), and
// format 0 (before encodings were recorded) plain lengths, whose messages
// read back as domain.EncodingUnknown.
//
// Hand-written because it is the hot path's only encoding and needs
// neither a schema nor allocation per message; it is fuzzed in
// frame_test.go.

// Frame formats, in comb_segments.frame_format.
const (
	framesPlain   = 0 // before migration 0004: no encodings
	framesEncoded = 1 // before headers
	framesHeaders = 2
)

var errCorruptSegment = errors.New("store: corrupt segment payload")

// frame is one decoded message of a segment; its slices alias the payload.
type frame struct {
	id, data []byte
	headers  domain.Headers // nil when none
	enc      domain.Encoding
}

// frameLen is how many bytes appendFrame appends for these.
func frameLen(id string, data []byte, headers domain.Headers) int {
	n := uvarintLen(uint64(len(id))) + len(id) + uvarintLen(uint64(len(data))<<3) + len(data)
	if len(headers) > 0 {
		n += uvarintLen(uint64(len(headers))) + len(headers)
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// appendFrame appends a message in format framesHeaders.
func appendFrame(buf []byte, id string, data []byte, enc domain.Encoding, headers domain.Headers) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(id)))
	buf = append(buf, id...)
	n := uint64(len(data))<<3 | uint64(enc&3)
	if len(headers) > 0 {
		n |= 4
	}
	buf = binary.AppendUvarint(buf, n)
	if len(headers) > 0 {
		buf = binary.AppendUvarint(buf, uint64(len(headers)))
		buf = append(buf, headers...)
	}
	return append(buf, data...)
}

// readFrame decodes the frame at the start of buf, written in format, and
// returns the rest.
func readFrame(buf []byte, format int16) (f frame, rest []byte, err error) {
	n, k := binary.Uvarint(buf)
	if k <= 0 || n > uint64(len(buf)-k) {
		return frame{}, nil, errCorruptSegment
	}
	f.id, buf = buf[k:k+int(n)], buf[k+int(n):]
	n, k = binary.Uvarint(buf)
	if k <= 0 {
		return frame{}, nil, errCorruptSegment
	}
	buf = buf[k:]
	switch format {
	case framesEncoded:
		f.enc, n = domain.Encoding(n&3), n>>2
	case framesHeaders:
		hasHeaders := n&4 != 0
		f.enc, n = domain.Encoding(n&3), n>>3
		if hasHeaders {
			h, k := binary.Uvarint(buf)
			if k <= 0 || h == 0 || h > uint64(len(buf)-k) {
				return frame{}, nil, errCorruptSegment
			}
			f.headers, buf = domain.Headers(buf[k:k+int(h)]), buf[k+int(h):]
		}
	}
	if n > uint64(len(buf)) {
		return frame{}, nil, errCorruptSegment
	}
	f.data = buf[:n]
	return f, buf[n:], nil
}
