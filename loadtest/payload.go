package loadtest

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// Encoding is how a message's header is laid out in its bytes.
type Encoding string

// Payload encodings.
const (
	// EncodingJSON makes every message a JSON string: the header in
	// URL-safe base64 followed by 'x' padding, between quotes. Comb carries
	// it as "data" byte for byte, so nothing is base64-encoded on the wire.
	EncodingJSON Encoding = "json"
	// EncodingBinary makes every message the raw binary header followed by
	// padding. It is not JSON, so Comb carries it as "data_b64".
	EncodingBinary Encoding = "binary"
)

// headerLen is the size of the binary header:
//
//	[0]      magic 0xFF (never valid UTF-8, so binary messages are never JSON)
//	[1]      layout version, 1
//	[2:4]    index of the message in its push request, uint16
//	[4:8]    run id, uint32
//	[8:12]   producer (pacer) id, uint32
//	[12:16]  partition index, uint32
//	[16:24]  sequence in the (producer, partition) stream, from 1, uint64
//	[24:32]  scheduled send time, Unix nanoseconds, int64
//	[32:40]  floor: every sequence of the stream up to it had its push
//	         answered (stored or failed) when this message was sent, uint64
//
// All integers are little endian.
const headerLen = 40

const (
	headerMagic   = 0xFF
	headerVersion = 1
)

// jsonHeaderLen is the base64 form of the header inside a JSON payload.
var jsonHeaderLen = base64.RawURLEncoding.EncodedLen(headerLen)

// minPayload returns the smallest payload an encoding can carry.
func minPayload(e Encoding) int {
	if e == EncodingJSON {
		return jsonHeaderLen + 2 // the quotes
	}
	return headerLen
}

// header is what a message says about itself.
type header struct {
	Index     uint16 // position in its push request
	Run       uint32
	Producer  uint32
	Partition uint32
	Seq       uint64
	Sched     int64 // scheduled send time, Unix nanoseconds
	Floor     uint64
}

func (h *header) put(b []byte) {
	b[0] = headerMagic
	b[1] = headerVersion
	binary.LittleEndian.PutUint16(b[2:], h.Index)
	binary.LittleEndian.PutUint32(b[4:], h.Run)
	binary.LittleEndian.PutUint32(b[8:], h.Producer)
	binary.LittleEndian.PutUint32(b[12:], h.Partition)
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.Sched))
	binary.LittleEndian.PutUint64(b[32:], h.Floor)
}

// errNotOurs marks a message that does not carry a loader header: left in
// the queue by something else.
var errNotOurs = errors.New("not a loadtest message")

func (h *header) get(b []byte) error {
	if len(b) < headerLen || b[0] != headerMagic || b[1] != headerVersion {
		return errNotOurs
	}
	h.Index = binary.LittleEndian.Uint16(b[2:])
	h.Run = binary.LittleEndian.Uint32(b[4:])
	h.Producer = binary.LittleEndian.Uint32(b[8:])
	h.Partition = binary.LittleEndian.Uint32(b[12:])
	h.Seq = binary.LittleEndian.Uint64(b[16:])
	h.Sched = int64(binary.LittleEndian.Uint64(b[24:]))
	h.Floor = binary.LittleEndian.Uint64(b[32:])
	return nil
}

// encodePayload writes h into a payload of size bytes (size >=
// minPayload(enc)) and returns it, reusing buf when it is large enough. The
// padding is constant, so two payloads differ only in their headers.
func encodePayload(buf []byte, enc Encoding, size int, h *header) []byte {
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	var raw [headerLen]byte
	h.put(raw[:])
	if enc == EncodingJSON {
		buf[0] = '"'
		base64.RawURLEncoding.Encode(buf[1:], raw[:])
		for i := 1 + jsonHeaderLen; i < size-1; i++ {
			buf[i] = 'x'
		}
		buf[size-1] = '"'
		return buf
	}
	copy(buf, raw[:])
	for i := headerLen; i < size; i++ {
		buf[i] = byte(i)
	}
	return buf
}

// decodePayload reads the header of a payload in either encoding.
func decodePayload(b []byte, h *header) error {
	if len(b) > 0 && b[0] == '"' {
		if len(b) < jsonHeaderLen+2 {
			return errNotOurs
		}
		var raw [headerLen]byte
		n, err := base64.RawURLEncoding.Decode(raw[:], b[1:1+jsonHeaderLen])
		if err != nil || n != headerLen {
			return errNotOurs
		}
		return h.get(raw[:])
	}
	return h.get(b)
}

// parseEncoding checks an encoding name.
func parseEncoding(s string) (Encoding, error) {
	switch e := Encoding(s); e {
	case EncodingJSON, EncodingBinary:
		return e, nil
	}
	return "", fmt.Errorf("payload encoding %q: want json or binary", s)
}
