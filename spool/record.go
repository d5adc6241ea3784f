package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/combmq/comb/domain"
)

// A record on disk is a frame:
//
//	length  uint32, little endian: the payload's bytes
//	crc     uint32, little endian: CRC-32C of the payload
//	payload version byte (1), then
//	        uvarint seq, varint unix nanoseconds,
//	        string tenant, string queue, uvarint message count,
//	        per message: string partition, string id, encoding byte,
//	        [bytes headers] [uvarint delay ms] [varint not-before unix
//	        nanoseconds], bytes data
//
// where a string or bytes is a uvarint length and that many bytes. The
// encoding byte's high bits say which of the bracketed fields follow
// (flagHeaders, flagDelay, flagNotBefore); records written before they
// existed never set them, so they read as before.

const (
	headerBytes   = 8
	recordVersion = 1
	// MaxRecordBytes bounds one record's payload: a push request is at
	// most protocol.MaxRequestBytes (or the bridge's cap), and its framing
	// here is never more than twice that. A length past it is garbage.
	MaxRecordBytes = 64 << 20
)

// Flags in a message's encoding byte.
const (
	flagHeaders   = 0x80
	flagDelay     = 0x40
	flagNotBefore = 0x20
	encodingMask  = 0x03
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors of the decoder. Both mean "no record here": on open, the file is
// truncated where they begin.
var (
	// ErrShort: the bytes end inside a record, as a crash mid-write leaves
	// them.
	ErrShort = errors.New("spool: record cut short")
	// ErrCorrupt: a record's checksum or contents are wrong.
	ErrCorrupt = errors.New("spool: corrupt record")
)

// Record is one spooled push request.
type Record struct {
	// Seq numbers the records of one file from 1; with the file's id it
	// names the record for the drain's idempotence.
	Seq int64
	// Time is when the record was appended.
	Time time.Time
	// Push is the request as the bridge accepted it.
	Push domain.PushParams
}

// messages returns how many messages r holds.
func (r *Record) messages() int { return len(r.Push.Messages) }

// AppendRecord appends r's frame to dst.
func AppendRecord(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, headerBytes)...)
	dst = append(dst, recordVersion)
	dst = binary.AppendUvarint(dst, uint64(r.Seq))
	dst = binary.AppendVarint(dst, r.Time.UnixNano())
	dst = appendString(dst, r.Push.Queue.Tenant)
	dst = appendString(dst, r.Push.Queue.Name)
	dst = binary.AppendUvarint(dst, uint64(len(r.Push.Messages)))
	for i := range r.Push.Messages {
		m := &r.Push.Messages[i]
		dst = appendString(dst, m.Partition)
		dst = appendString(dst, m.ID)
		flags := byte(m.Encoding) & encodingMask
		if len(m.Headers) > 0 {
			flags |= flagHeaders
		}
		if m.DelayMS > 0 {
			flags |= flagDelay
		}
		if !m.NotBefore.IsZero() {
			flags |= flagNotBefore
		}
		dst = append(dst, flags)
		if flags&flagHeaders != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
			dst = append(dst, m.Headers...)
		}
		if flags&flagDelay != 0 {
			dst = binary.AppendUvarint(dst, uint64(m.DelayMS))
		}
		if flags&flagNotBefore != 0 {
			dst = binary.AppendVarint(dst, m.NotBefore.UnixNano())
		}
		dst = binary.AppendUvarint(dst, uint64(len(m.Data)))
		dst = append(dst, m.Data...)
	}
	payload := dst[start+headerBytes:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// frameLen reads a frame header: the payload length and checksum. It
// returns ErrShort when hdr is shorter than a header and ErrCorrupt for a
// length no record has.
func frameLen(hdr []byte) (n int, sum uint32, err error) {
	if len(hdr) < headerBytes {
		return 0, 0, ErrShort
	}
	l := binary.LittleEndian.Uint32(hdr)
	if l == 0 || l > MaxRecordBytes {
		return 0, 0, fmt.Errorf("%w: length %d", ErrCorrupt, l)
	}
	return int(l), binary.LittleEndian.Uint32(hdr[4:]), nil
}

// DecodeRecord decodes the frame at the start of b and returns the record
// and the frame's size. The record owns its bytes: it does not alias b.
// It returns ErrShort when b ends inside the frame, ErrCorrupt when the
// frame is not a record; it never panics, whatever b holds.
func DecodeRecord(b []byte) (Record, int, error) {
	n, sum, err := frameLen(b)
	if err != nil {
		return Record{}, 0, err
	}
	if len(b)-headerBytes < n {
		return Record{}, 0, ErrShort
	}
	r, err := decodePayload(b[headerBytes:headerBytes+n], sum)
	if err != nil {
		return Record{}, 0, err
	}
	return r, headerBytes + n, nil
}

// decodePayload checks payload against its checksum and decodes it.
func decodePayload(payload []byte, sum uint32) (Record, error) {
	if crc32.Checksum(payload, castagnoli) != sum {
		return Record{}, fmt.Errorf("%w: checksum", ErrCorrupt)
	}
	d := decoder{b: payload}
	if v := d.byte(); v != recordVersion {
		return Record{}, fmt.Errorf("%w: version %d", ErrCorrupt, v)
	}
	var r Record
	seq := d.uvarint()
	if seq == 0 || seq > 1<<62 {
		d.fail()
	}
	r.Seq = int64(seq)
	r.Time = time.Unix(0, d.varint())
	r.Push.Queue.Tenant = d.string()
	r.Push.Queue.Name = d.string()
	count := d.uvarint()
	// Each message takes at least 4 bytes: a count past what is left is
	// garbage, and must not size an allocation.
	if count > uint64(len(d.b)-d.off)/4 {
		d.fail()
	}
	if d.err == nil {
		r.Push.Messages = make([]domain.PushMessage, count)
	}
	for i := range r.Push.Messages {
		if d.err != nil {
			break
		}
		m := &r.Push.Messages[i]
		m.Partition = d.string()
		m.ID = d.string()
		flags := d.byte()
		if flags&^(encodingMask|flagHeaders|flagDelay|flagNotBefore) != 0 {
			d.fail()
		}
		m.Encoding = domain.Encoding(flags & encodingMask)
		if flags&flagHeaders != 0 {
			if h := d.bytes(); len(h) > 0 {
				m.Headers = domain.Headers(h)
			} else {
				d.fail()
			}
		}
		if flags&flagDelay != 0 {
			if v := d.uvarint(); v > 0 && v <= 1<<62 {
				m.DelayMS = int64(v)
			} else {
				d.fail()
			}
		}
		if flags&flagNotBefore != 0 {
			m.NotBefore = time.Unix(0, d.varint())
		}
		m.Data = d.bytes()
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail()
	}
	if d.err != nil {
		return Record{}, d.err
	}
	return r, nil
}

// decoder reads a payload; the first problem sticks in err.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: malformed payload", ErrCorrupt)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || d.off >= len(d.b) {
		d.fail()
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail()
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail()
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)-d.off) {
		d.fail()
		return nil
	}
	out := make([]byte, n)
	copy(out, d.b[d.off:])
	d.off += int(n)
	return out
}

func (d *decoder) string() string { return string(d.bytes()) }
