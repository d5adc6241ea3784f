package wire

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/handjson"
	"github.com/combmq/comb/protocol"
)

// Replies are written by hand into byte buffers: encoding/json would compact
// (and so change) message bytes held as json.RawMessage, and a pop carries
// up to thousands of messages, so the encoders avoid reflection and
// allocate once per reply.

// IsJSONData reports whether message bytes can be written as "data": the
// bytes are one valid JSON value, valid UTF-8, with no space around it (a
// JSON reader would drop that space, and the bytes would not round-trip).
func IsJSONData(data []byte) bool {
	if len(data) == 0 {
		return false
	}
	switch data[0] {
	case ' ', '\t', '\n', '\r':
		return false
	}
	switch data[len(data)-1] {
	case ' ', '\t', '\n', '\r':
		return false
	}
	return utf8.Valid(data) && validJSON(data)
}

// isJSON says whether data with encoding enc is written as "data": as
// recorded at push time, or checked now for messages stored before
// encodings were recorded.
func isJSON(data []byte, enc domain.Encoding) bool {
	switch enc {
	case domain.EncodingJSON:
		return true
	case domain.EncodingBinary:
		return false
	}
	return IsJSONData(data)
}

// AppendData appends a message's bytes as a JSON object member:
// "data":<bytes> when they are JSON (enc says so, or, when unknown, the
// bytes are checked), else "data_b64":"<base64>".
func AppendData(b []byte, data []byte, enc domain.Encoding) []byte {
	if isJSON(data, enc) {
		b = append(b, `"data":`...)
		return append(b, data...)
	}
	b = append(b, `"data_b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, data)
	return append(b, '"')
}

// AppendTime appends t as a JSON string in RFC 3339 with up to nanosecond
// precision, in UTC.
func AppendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// messageSize estimates a message's encoded size, to size buffers once.
func messageSize(m *domain.Message) int {
	return 160 + len(m.Queue) + len(m.Partition) + len(m.ID) + len(m.Lease) + headersLen(m.Headers) + base64.StdEncoding.EncodedLen(len(m.Data))
}

// PopReply returns a pop reply, {"messages":[…]}, holding as many of msgs,
// in order, as fit in limit bytes (no limit when limit <= 0), and how many
// that is. A pop that leased more than fits in one NATS message can then
// reply with a prefix: the rest of the lease is delivered again later.
func PopReply(msgs []domain.Message, limit int) ([]byte, int) {
	size := 16
	for i := range msgs {
		size += messageSize(&msgs[i])
	}
	if limit > 0 && size > limit {
		size = limit
	}
	return AppendPopReply(make([]byte, 0, size), msgs, limit)
}

// AppendPopReply is PopReply appending to b; limit counts only the bytes it
// appends.
func AppendPopReply(b []byte, msgs []domain.Message, limit int) ([]byte, int) {
	base := len(b)
	b = append(b, `{"messages":[`...)
	n := 0
	var last timeSpan
	for i := range msgs {
		mark := len(b)
		if i > 0 {
			b = append(b, ',')
		}
		b = appendMessage(b, &msgs[i], &last)
		if limit > 0 && len(b)-base+2 > limit {
			b = b[:mark]
			break
		}
		n++
	}
	return append(b, "]}"...), n
}

// timeSpan is where in a reply the last created_at was encoded: the
// messages of one segment share their time, and formatting it was 2.6 %
// of the broker's CPU in the reference shape (a CPU profile); copying the
// bytes already written is much cheaper (BenchmarkPopReply).
type timeSpan struct {
	t      time.Time
	lo, hi int
}

func appendMessage(b []byte, m *domain.Message, last *timeSpan) []byte {
	b = slices.Grow(b, messageSize(m))
	b = append(b, '{')
	if m.Queue != "" {
		b = append(b, `"queue":`...)
		b = handjson.AppendString(b, m.Queue)
		b = append(b, ',')
	}
	b = append(b, `"partition":`...)
	b = handjson.AppendString(b, m.Partition)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, m.Offset, 10)
	if m.ID != "" {
		b = append(b, `,"id":`...)
		b = handjson.AppendString(b, m.ID)
	}
	if m.Lease != "" {
		b = append(b, `,"lease":`...)
		b = handjson.AppendString(b, m.Lease)
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(m.Attempt), 10)
	b = append(b, `,"created_at":`...)
	if last.hi > 0 && m.CreatedAt.Equal(last.t) {
		b = append(b, b[last.lo:last.hi]...)
	} else {
		lo := len(b)
		b = AppendTime(b, m.CreatedAt)
		*last = timeSpan{t: m.CreatedAt, lo: lo, hi: len(b)}
	}
	b = appendHeaders(b, m.Headers)
	b = append(b, ',')
	b = AppendData(b, m.Data, m.Encoding)
	return append(b, '}')
}

// appendHeaders appends `,"headers":{…}` when there are headers: they are
// stored in their reply form (domain.Headers), so they are copied as is.
func appendHeaders(b []byte, h domain.Headers) []byte {
	if len(h) == 0 {
		return b
	}
	b = append(b, `,"headers":`...)
	return append(b, h...)
}

// headersLen is what appendHeaders writes for h.
func headersLen(h domain.Headers) int {
	if len(h) == 0 {
		return 0
	}
	return len(`,"headers":`) + len(h)
}

// pushStatus is a push status's wire name.
func pushStatus(s domain.PushStatus) string {
	switch s {
	case domain.Duplicate:
		return protocol.StatusDuplicate
	case domain.Spooled:
		return protocol.StatusSpooled
	}
	return protocol.StatusStored
}

// PushReply returns a push (or put) reply, protocol.PushReply: one result
// per message in request order.
func PushReply(results []domain.PushResult) []byte {
	b := make([]byte, 0, 16+64*len(results))
	b = append(b, `{"results":[`...)
	for i := range results {
		r := &results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"partition":`...)
		b = handjson.AppendString(b, r.Partition)
		if r.Status != domain.Spooled { // a spooled message has no offset yet
			b = append(b, `,"offset":`...)
			b = strconv.AppendInt(b, r.Offset, 10)
		}
		b = append(b, `,"status":`...)
		b = handjson.AppendString(b, pushStatus(r.Status))
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// AckReply returns an ack reply, {"results":[{"ok":true},{"ok":false,"error":"…"}]}.
func AckReply(results []domain.AckResult) []byte {
	b := make([]byte, 0, 16+16*len(results))
	b = append(b, `{"results":`...)
	b = appendAckResults(b, results)
	return append(b, '}')
}

// PopAcks returns the member a pop reply ends with when its request
// carried acks, `,"acks":[{"ok":true},…]`: place it before the reply's
// closing brace (AppendPopAcks).
func PopAcks(results []domain.AckResult) []byte {
	b := make([]byte, 0, 16+16*len(results))
	b = append(b, `,"acks":`...)
	return appendAckResults(b, results)
}

// AppendPopAcks puts acks (PopAcks) into a pop reply, before its closing
// brace.
func AppendPopAcks(reply, acks []byte) []byte {
	if len(acks) == 0 || len(reply) == 0 {
		return reply
	}
	reply = append(reply[:len(reply)-1], acks...)
	return append(reply, '}')
}

// appendAckResults appends results as a JSON array of
// {"ok":true} and {"ok":false,"error":"…"}.
func appendAckResults(b []byte, results []domain.AckResult) []byte {
	b = append(b, '[')
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		if results[i].OK {
			b = append(b, `{"ok":true}`...)
			continue
		}
		b = append(b, `{"ok":false,"error":`...)
		b = handjson.AppendString(b, results[i].Error)
		b = append(b, '}')
	}
	return append(b, ']')
}

// RenewReply returns a renew reply,
// {"results":[{"lease":"l","ok":true,"expires_at":"…"},{"lease":"m","ok":false,"error":"…"}]}.
func RenewReply(results []domain.RenewResult) []byte {
	b := make([]byte, 0, 16+80*len(results))
	b = append(b, `{"results":[`...)
	for i := range results {
		r := &results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"lease":`...)
		b = handjson.AppendString(b, r.Lease)
		if r.OK {
			b = append(b, `,"ok":true,"expires_at":`...)
			b = AppendTime(b, r.ExpiresAt)
		} else {
			b = append(b, `,"ok":false,"error":`...)
			b = handjson.AppendString(b, r.Error)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// DLQReply returns a dead-letter listing,
// {"dead_letters":[…],"next":"<cursor or empty>"}, holding as many of dls
// as fit in limit bytes (no limit when limit <= 0), and how many that is.
// When it leaves some out, next becomes the dlq_id of the last one it holds,
// which is the store's cursor for the page after it.
func DLQReply(dls []domain.DeadLetter, next string, limit int) ([]byte, int) {
	size := 32 + len(next)
	for i := range dls {
		size += 200 + base64.StdEncoding.EncodedLen(len(dls[i].Data))
	}
	if limit > 0 && size > limit {
		size = limit
	}
	// Room kept for the closing `],"next":"…"}`; a dlq_id is short.
	reserve := 16 + 2*len(next) + 64
	b := make([]byte, 0, size)
	b = append(b, `{"dead_letters":[`...)
	n := 0
	for i := range dls {
		mark := len(b)
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDeadLetter(b, &dls[i])
		if limit > 0 && len(b)+reserve > limit {
			b = b[:mark]
			break
		}
		n++
	}
	if n < len(dls) {
		next = ""
		if n > 0 {
			next = dls[n-1].DLQID
		}
	}
	b = append(b, `],"next":`...)
	b = handjson.AppendString(b, next)
	return append(b, '}'), n
}

func appendDeadLetter(b []byte, d *domain.DeadLetter) []byte {
	b = append(b, `{"dlq_id":`...)
	b = handjson.AppendString(b, d.DLQID)
	b = append(b, `,"group":`...)
	b = handjson.AppendString(b, d.Group)
	b = append(b, `,"partition":`...)
	b = handjson.AppendString(b, d.Partition)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, d.Offset, 10)
	if d.ID != "" {
		b = append(b, `,"id":`...)
		b = handjson.AppendString(b, d.ID)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(d.Attempts), 10)
	b = append(b, `,"reason":`...)
	b = handjson.AppendString(b, d.Reason)
	if d.Error != "" {
		b = append(b, `,"error":`...)
		b = handjson.AppendString(b, d.Error)
	}
	b = append(b, `,"dead_at":`...)
	b = AppendTime(b, d.DeadAt)
	b = appendHeaders(b, d.Headers)
	b = append(b, ',')
	b = AppendData(b, d.Data, d.Encoding)
	return append(b, '}')
}

// marshal encodes a reply shape that cannot fail to encode.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// DoneReply returns the reply of a dead-letter replay or purge,
// protocol.DoneReply.
func DoneReply(n int) []byte { return marshal(protocol.DoneReply{Done: n}) }

// SeekReply returns the reply of a seek, protocol.SeekReply: how many
// cursors moved.
func SeekReply(n int) []byte { return marshal(protocol.SeekReply{Moved: n}) }

// OKReply is the reply of a request that returns nothing else (delete).
var OKReply = marshal(protocol.OKReply{OK: true})

// ConfigReply returns a configure reply: the queue's whole configuration,
// protocol.QueueConfig.
func ConfigReply(c domain.QueueConfig) []byte { return marshal(protocol.QueueConfig(c)) }

// GroupsReply returns a group listing, protocol.GroupsReply, with the
// oldest pending age in seconds and an empty list as [] (never null).
func GroupsReply(groups []domain.GroupState) []byte {
	out := protocol.GroupsReply{Groups: make([]protocol.GroupState, len(groups))}
	for i, g := range groups {
		out.Groups[i] = protocol.GroupState{Name: g.Name, Pending: g.Pending, Leased: g.Leased, Dead: g.Dead,
			OldestPendingAgeS: g.OldestPendingAge.Seconds()}
	}
	return marshal(out)
}

// DataLen returns how many bytes AppendData writes for data, not counting
// the member name.
func DataLen(data []byte, enc domain.Encoding) int {
	if isJSON(data, enc) {
		return len(data)
	}
	return base64.StdEncoding.EncodedLen(len(data)) + 2
}

// MessageSize returns how many bytes a pop reply spends on m: what
// AppendPopReply writes for it, plus the comma before it. The store uses it
// to lease no more than one reply can carry.
func MessageSize(m *domain.Message) int {
	var buf [40]byte
	n := len(`,{"partition":,"offset":,"attempt":,"created_at":"",}`)
	n += stringLen(m.Partition)
	if m.Queue != "" {
		n += len(`"queue":,`) + stringLen(m.Queue)
	}
	n += len(strconv.AppendInt(buf[:0], m.Offset, 10))
	if m.ID != "" {
		n += len(`,"id":`) + stringLen(m.ID)
	}
	if m.Lease != "" {
		n += len(`,"lease":`) + stringLen(m.Lease)
	}
	n += len(strconv.AppendInt(buf[:0], int64(m.Attempt), 10))
	n += timeLen(m.CreatedAt)
	n += headersLen(m.Headers)
	if isJSON(m.Data, m.Encoding) {
		n += len(`"data":`) + len(m.Data)
	} else {
		n += len(`"data_b64":""`) + base64.StdEncoding.EncodedLen(len(m.Data))
	}
	return n
}

// timeLen returns len(t.UTC().AppendFormat(nil, time.RFC3339Nano)) without
// formatting it, which the store's sizing of every message it hands to a
// pop would pay for: "2006-01-02T15:04:05Z" for a year of four digits,
// and a fraction with its trailing zeros trimmed.
func timeLen(t time.Time) int {
	u := t.UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		var buf [48]byte
		return len(u.AppendFormat(buf[:0], time.RFC3339Nano))
	}
	n := len("2006-01-02T15:04:05Z")
	if ns := u.Nanosecond(); ns != 0 {
		d := 9
		for ns%10 == 0 {
			ns /= 10
			d--
		}
		n += 1 + d
	}
	return n
}

// stringLen returns len(handjson.AppendString(nil, s)).
func stringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case handjson.SafeASCII[c]:
				n++
			case c == '"', c == '\\', c == '\n', c == '\r', c == '\t':
				n += 2
			default:
				n += 6
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// PeekReply returns a peek reply, protocol.PeekReply:
// {"messages":[…],"next":<offset or null>}, holding as many of page's
// messages, in order, as fit in limit bytes (no limit when limit <= 0), and
// how many that is. When it leaves some out, next becomes the offset of the
// first one left out, so that paging on next misses nothing.
func PeekReply(page domain.PeekPage, limit int) ([]byte, int) {
	size := 32
	for i := range page.Messages {
		size += messageSize(&page.Messages[i])
	}
	if limit > 0 && size > limit {
		size = limit
	}
	const reserve = 40 // the closing `],"next":<int64>}`
	b := make([]byte, 0, size)
	b = append(b, `{"messages":[`...)
	n := 0
	for i := range page.Messages {
		m := &page.Messages[i]
		mark := len(b)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"partition":`...)
		b = handjson.AppendString(b, m.Partition)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, m.Offset, 10)
		if m.ID != "" {
			b = append(b, `,"id":`...)
			b = handjson.AppendString(b, m.ID)
		}
		b = append(b, `,"created_at":`...)
		b = AppendTime(b, m.CreatedAt)
		b = appendHeaders(b, m.Headers)
		b = append(b, ',')
		b = AppendData(b, m.Data, m.Encoding)
		b = append(b, '}')
		if limit > 0 && len(b)+reserve > limit {
			b = b[:mark]
			break
		}
		n++
	}
	next := page.Next
	if n < len(page.Messages) {
		next = page.Messages[n].Offset
	}
	b = append(b, `],"next":`...)
	if next < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, next, 10)
	}
	return append(b, '}'), n
}
