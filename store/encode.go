package store

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// byteaArray is a bytea[] parameter whose encoding makes room for all of
// it at once. pgx encodes an array element by element into a buffer it
// starts at 256 bytes for every query, so a push transaction's segment
// payloads (hundreds of KB) grew it by doubling: about a dozen large
// allocations and twice the payload copied, 4-5 % of the broker's CPU in
// the reference shape (a CPU profile of `comb serve -pprof`). The encoding
// itself stays pgx's (TestByteaArrayEncodesAsPgx).
type byteaArray [][]byte

// binaryLen is the size of a's binary array encoding: a 20-byte header
// (dimensions, null flag, element type, one dimension's length and lower
// bound) and each element's 4-byte length and bytes.
func (a byteaArray) binaryLen() int {
	n := 20
	for _, b := range a {
		n += 4 + len(b)
	}
	return n
}

type presizeByteaArray struct{ next pgtype.EncodePlan }

func (p *presizeByteaArray) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *presizeByteaArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(byteaArray)
	return p.next.Encode([][]byte(a), slices.Grow(buf, a.binaryLen()))
}

func tryWrapByteaArray(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if a, ok := value.(byteaArray); ok {
		return &presizeByteaArray{}, [][]byte(a), true
	}
	return nil, nil, false
}

// registerEncoders adds the store's encode plans to a connection's type
// map, ahead of pgx's own (which handle every other value).
func registerEncoders(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapByteaArray}, m.TryWrapEncodePlanFuncs...)
}

// afterConnect readies a new connection of either pool.
func afterConnect(_ context.Context, c *pgx.Conn) error {
	registerEncoders(c.TypeMap())
	return nil
}
