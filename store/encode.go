package store

import (
	"encoding/binary"
	"slices"

	"github.com/jackc/pgx/v5/pgtype"
)

// segmentPayloads is a push transaction's segment payloads, the bytea[]
// parameter of insertSegmentsSQL: each segment's messages, framed back to
// back (frame.go). Its encoding frames the messages straight into the
// buffer pgx sends the parameters from, making room for all of it at once.
//
// Building each payload first and handing pgx a [][]byte copied every
// message once more, and pgx's own array encoding, starting at 256 bytes
// for every query, grew its buffer by doubling (an allocation profile of
// the reference shape, docs/benchmarks.md). The encoding is pgx's binary
// array encoding (TestSegmentPayloadsEncodeAsPgx, FuzzSegmentPayloads);
// should pgx ever ask for the text format, the payloads are built and
// the encoding left to pgx.
type segmentPayloads []*segmentBuf

// binaryLen is the size of a's binary array encoding: a 20-byte header
// (dimensions, null flag, element type, one dimension's length and lower
// bound) and each element's 4-byte length and bytes.
func (a segmentPayloads) binaryLen() int {
	n := 20
	for _, seg := range a {
		n += 4 + seg.size
	}
	return n
}

// frames returns the payloads built, for the text format.
func (a segmentPayloads) frames() [][]byte {
	out := make([][]byte, len(a))
	for i, seg := range a {
		buf := make([]byte, 0, seg.size)
		for _, m := range seg.msgs {
			buf = appendFrame(buf, m.ID, m.Data, m.Encoding, m.Headers)
		}
		out[i] = buf
	}
	return out
}

// encodeSegmentPayloads encodes segmentPayloads; next is pgx's plan for
// a [][]byte in the format asked for.
type encodeSegmentPayloads struct {
	next   pgtype.EncodePlan
	binary bool
}

// probeBinary is pgx's binary encoding of the bytea[] {"x"}.
var probeBinary = []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, byte(pgtype.ByteaOID), 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 'x'}

func (e *encodeSegmentPayloads) SetNext(next pgtype.EncodePlan) {
	e.next = next
	// The format is the plan's, and pgx does not say which: its encoding
	// of an array tells.
	probe, err := next.Encode([][]byte{[]byte("x")}, nil)
	e.binary = err == nil && slices.Equal(probe, probeBinary)
}

func (e *encodeSegmentPayloads) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(segmentPayloads)
	if !e.binary {
		return e.next.Encode(a.frames(), buf)
	}
	buf = slices.Grow(buf, a.binaryLen())
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // no nulls
	buf = binary.BigEndian.AppendUint32(buf, pgtype.ByteaOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(a)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for _, seg := range a {
		buf = binary.BigEndian.AppendUint32(buf, uint32(seg.size))
		for _, m := range seg.msgs {
			buf = appendFrame(buf, m.ID, m.Data, m.Encoding, m.Headers)
		}
	}
	return buf, nil
}

func tryWrapSegmentPayloads(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if _, ok := value.(segmentPayloads); ok {
		return &encodeSegmentPayloads{}, [][]byte{}, true
	}
	return nil, nil, false
}

// registerEncoders adds the store's encode plans to a connection's type
// map, ahead of pgx's own (which handle every other value).
func registerEncoders(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapSegmentPayloads}, m.TryWrapEncodePlanFuncs...)
}
