package wire

import (
	"encoding/base64"
	"strconv"
	"time"

	"github.com/combmq/comb/store"
)

// Headers of a put request.
const (
	HeaderPartition = "Comb-Partition"
	HeaderID        = "Comb-Id"
)

// Request bounds. Each one keeps a single request's cost (memory, rows
// touched, time a worker is busy) bounded whatever a client sends.
const (
	// MaxPushMessages is the most messages in one push.
	MaxPushMessages = 10000
	// MaxPopMessages bounds a pop's max.
	MaxPopMessages = 10000
	// DefaultPopMessages is a pop's max when it names none.
	DefaultPopMessages = 100
	// MaxPopPartitions bounds a pop's partitions.
	MaxPopPartitions = 1000
	// MaxWaitMS bounds a pop's wait_ms (5 minutes): longer polls only hold
	// a waiter slot that a reconnecting client would hold anyway.
	MaxWaitMS = 300000
	// MinLeaseMS and MaxLeaseMS bound lease_ms in pops, renews and queue
	// settings: shorter leases expire before a reply can be acted on,
	// longer ones hide a crashed consumer's messages for too long.
	MinLeaseMS = 100
	MaxLeaseMS = 86400000
	// MaxAcks is the most acks in one ack request, MaxLeases the most
	// leases in one renew, MaxDLQIDs the most ids in one replay or purge.
	MaxAcks   = 10000
	MaxLeases = 10000
	MaxDLQIDs = 10000
	// MaxDLQLimit bounds a dead-letter listing's page size.
	MaxDLQLimit = 1000
)

// Limits bound a push or put request by size. The queue's own
// max_message_bytes is enforced by the store; these are the bridge's hard
// caps, checked before anything is stored.
type Limits struct {
	// MaxMessageBytes is the largest message the bridge accepts.
	MaxMessageBytes int
	// MaxRequestBytes is the largest request body the bridge accepts.
	MaxRequestBytes int
}

// DefaultLimits returns 8 MiB for both a message and a request: NATS's
// recommended ceiling for max_payload, above which a request could not
// arrive anyway.
func DefaultLimits() Limits {
	return Limits{MaxMessageBytes: 8 << 20, MaxRequestBytes: 8 << 20}
}

func (l Limits) checkRequest(body []byte) error {
	if l.MaxRequestBytes > 0 && len(body) > l.MaxRequestBytes {
		return Errorf(CodeTooLarge, "request is %d bytes, over the limit of %d", len(body), l.MaxRequestBytes)
	}
	return nil
}

// DecodePush decodes and checks a push body:
// {"messages":[{"partition":"eu","id":"x","data":<JSON>}, {"data_b64":"…"}]}.
//
// Each message carries exactly one of "data" (any JSON value, kept byte for
// byte) or "data_b64" (standard base64, padded or not). A message with
// neither is a 400: an empty message is pushed as "data_b64": "". A partition
// left out (or "") is store.DefaultPartition. A request over
// lim.MaxRequestBytes, a message over lim.MaxMessageBytes, or more than
// MaxPushMessages messages is a 413.
func DecodePush(body []byte, lim Limits) ([]store.PushMessage, error) {
	if err := lim.checkRequest(body); err != nil {
		return nil, err
	}
	raw, err := parsePush(body)
	if err != nil {
		return nil, err
	}
	return toPushMessages(raw, lim)
}

// DecodePut checks a put: the body is the message, partition and id come
// from the Comb-Partition and Comb-Id headers (empty when absent).
func DecodePut(body []byte, partition, id string, lim Limits) (store.PushMessage, error) {
	if err := lim.checkRequest(body); err != nil {
		return store.PushMessage{}, err
	}
	if lim.MaxMessageBytes > 0 && len(body) > lim.MaxMessageBytes {
		return store.PushMessage{}, Errorf(CodeTooLarge, "message is %d bytes, over the limit of %d", len(body), lim.MaxMessageBytes)
	}
	pm, err := checkMessage(partition, id, HeaderPartition+" header", HeaderID+" header")
	if err != nil {
		return store.PushMessage{}, err
	}
	pm.Data = body
	if pm.Data == nil {
		pm.Data = []byte{}
	}
	return pm, nil
}

// checkMessage checks a message's partition and id and returns the message
// without data. Errors name the field bare ("partition: …"); callers add
// where the message is.
func checkMessage(partition, id, partitionField, idField string) (store.PushMessage, error) {
	pm := store.PushMessage{Partition: partition, ID: id}
	if partition == "" {
		pm.Partition = store.DefaultPartition
	} else if err := validateText(partitionField, partition, MaxNameBytes); err != nil {
		return pm, err
	}
	if id != "" {
		if err := validateText(idField, id, MaxIDBytes); err != nil {
			return pm, err
		}
	}
	return pm, nil
}

// prefixError puts where in front of a field error: "messages[3].partition: …".
func prefixError(where string, err error) error {
	if we, ok := AsError(err); ok {
		return Errorf(we.Code, "%s.%s", where, we.Message)
	}
	return err
}

// decodeBase64 accepts standard base64 with or without padding.
func decodeBase64(s string) ([]byte, error) {
	enc := base64.StdEncoding
	if len(s)%4 != 0 {
		enc = base64.RawStdEncoding
	}
	data, err := enc.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

func isSyntax(we *Error) bool {
	return len(we.Message) >= 9 && we.Message[:9] == "malformed"
}

// Pop is a decoded pop request.
type Pop struct {
	// Request is the store's request; its Queue is left for the caller.
	Request store.PopRequest
	// Wait is how long to long-poll when nothing is ready.
	Wait time.Duration
}

type popJSON struct {
	Group      string `json:"group"`
	Partition  string `json:"partition"`
	Max        *int64 `json:"max"`
	Partitions *int64 `json:"partitions"`
	WaitMS     *int64 `json:"wait_ms"`
	LeaseMS    *int64 `json:"lease_ms"`
	AutoAck    bool   `json:"auto_ack"`
	From       string `json:"from"`
}

// DecodePop decodes and checks a pop body; every field is optional and an
// empty body is valid. Bounds: max 1..10000 (default 100), partitions
// 1..1000 (default 1, and 1 when a partition is named), wait_ms 0..300000,
// lease_ms 0 (the queue's) or 100..86400000, from "all", "new" or an
// RFC 3339 time. A group or partition given as "" means the default.
func DecodePop(body []byte) (Pop, error) {
	var req popJSON
	if err := decodeObject(body, &req); err != nil {
		return Pop{}, err
	}
	p := Pop{Request: store.PopRequest{
		Group:      store.DefaultGroup,
		Partition:  req.Partition,
		Max:        DefaultPopMessages,
		Partitions: 1,
		AutoAck:    req.AutoAck,
		From:       store.From{Kind: "all"},
	}}
	if req.Group != "" {
		if err := ValidateName("group", req.Group); err != nil {
			return Pop{}, err
		}
		p.Request.Group = req.Group
	}
	if req.Partition != "" {
		if err := ValidateName("partition", req.Partition); err != nil {
			return Pop{}, err
		}
	}
	if req.Max != nil {
		if err := checkRange("max", *req.Max, 1, MaxPopMessages); err != nil {
			return Pop{}, err
		}
		p.Request.Max = int(*req.Max)
	}
	if req.Partitions != nil {
		if err := checkRange("partitions", *req.Partitions, 1, MaxPopPartitions); err != nil {
			return Pop{}, err
		}
		if req.Partition != "" && *req.Partitions != 1 {
			return Pop{}, badRequest("partitions: must be 1 when a partition is named")
		}
		p.Request.Partitions = int(*req.Partitions)
	}
	if req.WaitMS != nil {
		if err := checkRange("wait_ms", *req.WaitMS, 0, MaxWaitMS); err != nil {
			return Pop{}, err
		}
		p.Wait = time.Duration(*req.WaitMS) * time.Millisecond
	}
	if req.LeaseMS != nil {
		if err := checkLease("lease_ms", *req.LeaseMS); err != nil {
			return Pop{}, err
		}
		p.Request.LeaseMS = *req.LeaseMS
	}
	from, err := ParseFrom(req.From)
	if err != nil {
		return Pop{}, err
	}
	p.Request.From = from
	return p, nil
}

// ParseFrom parses a pop's from: "" or "all", "new", or an RFC 3339 time.
func ParseFrom(s string) (store.From, error) {
	switch s {
	case "", "all":
		return store.From{Kind: "all"}, nil
	case "new":
		return store.From{Kind: "new"}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return store.From{}, badRequest("from: %q is not all, new or an RFC 3339 time", s)
	}
	return store.From{Kind: "time", Time: t}, nil
}

func checkRange(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return badRequest("%s: %d is out of range %d..%d", field, v, lo, hi)
	}
	return nil
}

func checkLease(field string, v int64) error {
	if v == 0 {
		return nil
	}
	if v < MinLeaseMS || v > MaxLeaseMS {
		return badRequest("%s: %d is out of range: 0 (the queue's lease) or %d..%d", field, v, MinLeaseMS, MaxLeaseMS)
	}
	return nil
}

type ackJSON struct {
	Group string        `json:"group"`
	Acks  []ackItemJSON `json:"acks"`
}

type ackItemJSON struct {
	Partition string `json:"partition"`
	Offset    *int64 `json:"offset"`
	Lease     string `json:"lease"`
	Status    string `json:"status"`
}

// DecodeAck decodes and checks an ack body:
// {"group":"g","acks":[{"partition":"p","offset":17,"lease":"l","status":"completed"}]}.
// It returns the group (store.DefaultGroup when omitted) and the acks.
// Each ack needs an offset and a lease; partition defaults like a push's,
// status to completed. An unknown status fails the whole request, so that a
// client never believes a typo settled anything.
func DecodeAck(body []byte) (string, []store.Ack, error) {
	var req ackJSON
	if err := decodeObject(body, &req); err != nil {
		if we, _ := AsError(err); we != nil && !isSyntax(we) {
			if located := decodeElements(body, "acks", func() any { return new(ackItemJSON) }); located != nil {
				return "", nil, located
			}
		}
		return "", nil, err
	}
	group := store.DefaultGroup
	if req.Group != "" {
		if err := ValidateName("group", req.Group); err != nil {
			return "", nil, err
		}
		group = req.Group
	}
	if len(req.Acks) == 0 {
		return "", nil, badRequest("acks: at least one ack is required")
	}
	if len(req.Acks) > MaxAcks {
		return "", nil, Errorf(CodeTooLarge, "acks: %d acks, at most %d per request", len(req.Acks), MaxAcks)
	}
	out := make([]store.Ack, len(req.Acks))
	for i, a := range req.Acks {
		ack := store.Ack{Partition: a.Partition, Lease: a.Lease, Status: a.Status}
		if ack.Partition == "" {
			ack.Partition = store.DefaultPartition
		} else if err := ValidateName("partition", a.Partition); err != nil {
			return "", nil, prefixError("acks["+strconv.Itoa(i)+"]", err)
		}
		if a.Offset == nil {
			return "", nil, badRequest("acks[%d].offset: required", i)
		}
		if *a.Offset < 0 {
			return "", nil, badRequest("acks[%d].offset: %d is negative", i, *a.Offset)
		}
		ack.Offset = *a.Offset
		if p := leaseProblem(a.Lease); p != "" {
			return "", nil, badRequest("acks[%d].lease: %s", i, p)
		}
		switch a.Status {
		case "":
			ack.Status = store.AckCompleted
		case store.AckCompleted, store.AckRetry, store.AckFailed, store.AckDead:
		default:
			return "", nil, badRequest("acks[%d].status: unknown status %q; want completed, retry, failed or dead", i, a.Status)
		}
		out[i] = ack
	}
	return group, out, nil
}

// leaseProblem says what is wrong with a lease string, or "".
func leaseProblem(l string) string {
	switch {
	case l == "":
		return "required"
	case len(l) > MaxLeaseBytes:
		return "longer than " + strconv.Itoa(MaxLeaseBytes) + " bytes"
	}
	return ""
}

type renewJSON struct {
	Leases  []string `json:"leases"`
	LeaseMS int64    `json:"lease_ms"`
}

// DecodeRenew decodes and checks a renew body,
// {"leases":["l-1"],"lease_ms":30000}: one or more leases, and lease_ms 0
// (the queue's lease time) or 100..86400000.
func DecodeRenew(body []byte) ([]string, int64, error) {
	var req renewJSON
	if err := decodeObject(body, &req); err != nil {
		return nil, 0, err
	}
	if len(req.Leases) == 0 {
		return nil, 0, badRequest("leases: at least one lease is required")
	}
	if len(req.Leases) > MaxLeases {
		return nil, 0, Errorf(CodeTooLarge, "leases: %d leases, at most %d per request", len(req.Leases), MaxLeases)
	}
	for i, l := range req.Leases {
		if p := leaseProblem(l); p != "" {
			return nil, 0, badRequest("leases[%d]: %s", i, p)
		}
	}
	if err := checkLease("lease_ms", req.LeaseMS); err != nil {
		return nil, 0, err
	}
	return req.Leases, req.LeaseMS, nil
}

// Ranges of queue settings accepted by configure. Each bounds a cost or a
// mistake: a lease like a pop's; attempts beyond 1000 mean "never give
// up", which dead_letter=false says better; a dedup window longer than a
// week makes the id index large; retention and age up to ten years; a delay
// up to a week; counts and bytes up to 2^53-1, the largest integer every
// JSON client (JavaScript included) reads exactly; a message up to 8 MiB,
// the store's cap and NATS's recommended ceiling on a payload (a message
// travels base64-encoded inside a pop reply, so the NATS server's
// max_payload should exceed 4/3 of the largest message).
const (
	MaxAttempts        = 1000
	MaxDedupWindowS    = 7 * 86400
	MaxRetentionS      = 10 * 365 * 86400
	MaxDelayMS         = 7 * 86400 * 1000
	MaxCount           = 1<<53 - 1
	MaxMessageBytesCap = 8 << 20
)

// DecodeConfigure decodes and checks a configure body into a patch: only
// the fields given change. Unknown fields and out-of-range values are a
// 400 naming the field; an empty body (or {}) creates the queue with
// defaults, or returns its settings unchanged.
func DecodeConfigure(body []byte) (store.ConfigPatch, error) {
	var p store.ConfigPatch
	if err := decodeObject(body, &p); err != nil {
		return store.ConfigPatch{}, err
	}
	checks := []struct {
		field  string
		v      *int64
		lo, hi int64
	}{
		{"max_attempts", p.MaxAttempts, 1, MaxAttempts},
		{"dedup_window_s", p.DedupWindowS, 0, MaxDedupWindowS},
		{"completed_retention_s", p.CompletedRetentionS, 0, MaxRetentionS},
		{"max_age_s", p.MaxAgeS, 0, MaxRetentionS},
		{"delay_ms", p.DelayMS, 0, MaxDelayMS},
		{"max_messages", p.MaxMessages, 0, MaxCount},
		{"max_bytes", p.MaxBytes, 0, MaxCount},
		{"max_message_bytes", p.MaxMessageBytes, 1, MaxMessageBytesCap},
	}
	if p.LeaseMS != nil {
		if err := checkRange("lease_ms", *p.LeaseMS, MinLeaseMS, MaxLeaseMS); err != nil {
			return store.ConfigPatch{}, err
		}
	}
	for _, c := range checks {
		if c.v == nil {
			continue
		}
		if err := checkRange(c.field, *c.v, c.lo, c.hi); err != nil {
			return store.ConfigPatch{}, err
		}
	}
	return p, nil
}

// DecodeEmpty checks the body of a request that takes no fields (info,
// list, delete): empty, or an empty JSON object.
func DecodeEmpty(body []byte) error {
	var none struct{}
	return decodeObject(body, &none)
}

// DLQ operations.
const (
	DLQList   = "list"
	DLQReplay = "replay"
	DLQPurge  = "purge"
)

// DLQ is a decoded dead-letter request.
type DLQ struct {
	// Op is DLQList, DLQReplay or DLQPurge.
	Op string
	// Query is the listing's query (Op DLQList); its Queue is left for the
	// caller.
	Query store.DLQQuery
	// IDs are the dead letters to replay or purge.
	IDs []string
}

type dlqJSON struct {
	Group  string   `json:"group"`
	Limit  *int64   `json:"limit"`
	After  string   `json:"after"`
	Replay []string `json:"replay"`
	Purge  []string `json:"purge"`
}

// DecodeDLQ decodes and checks a dlq body: a listing
// {"group":"g","limit":100,"after":"<cursor>"} (all optional; limit
// 1..1000, default 100), or {"replay":[ids]}, or {"purge":[ids]}. Replay and
// purge take no other field.
func DecodeDLQ(body []byte) (DLQ, error) {
	var req dlqJSON
	if err := decodeObject(body, &req); err != nil {
		return DLQ{}, err
	}
	if req.Replay != nil || req.Purge != nil {
		op, ids := DLQReplay, req.Replay
		if req.Purge != nil {
			op, ids = DLQPurge, req.Purge
		}
		switch {
		case req.Replay != nil && req.Purge != nil:
			return DLQ{}, badRequest("replay and purge given; send one of them")
		case req.Group != "" || req.Limit != nil || req.After != "":
			return DLQ{}, badRequest("%s: takes no group, limit or after", op)
		case len(ids) == 0:
			return DLQ{}, badRequest("%s: at least one dlq_id is required", op)
		case len(ids) > MaxDLQIDs:
			return DLQ{}, Errorf(CodeTooLarge, "%s: %d ids, at most %d per request", op, len(ids), MaxDLQIDs)
		}
		for i, id := range ids {
			if id == "" || len(id) > MaxLeaseBytes {
				return DLQ{}, badRequest("%s[%d]: not a dlq_id", op, i)
			}
		}
		return DLQ{Op: op, IDs: ids}, nil
	}
	d := DLQ{Op: DLQList, Query: store.DLQQuery{Group: req.Group, Limit: 100, After: req.After}}
	if req.Group != "" {
		if err := ValidateName("group", req.Group); err != nil {
			return DLQ{}, err
		}
	}
	if req.Limit != nil {
		if err := checkRange("limit", *req.Limit, 1, MaxDLQLimit); err != nil {
			return DLQ{}, err
		}
		d.Query.Limit = int(*req.Limit)
	}
	return d, nil
}

// Seek is a decoded seek request.
type Seek struct {
	Group     string
	Partition string // "" means every partition
	To        store.From
}

type seekJSON struct {
	Group     string `json:"group"`
	Partition string `json:"partition"`
	To        string `json:"to"`
}

// DecodeSeek decodes and checks a seek body:
// {"group":"g","partition":"p","to":"start"|"end"|"<RFC 3339 time>"}.
// group defaults like a pop's; partition is optional (every partition);
// to is required, so that a bare request never rewinds a group by accident.
func DecodeSeek(body []byte) (Seek, error) {
	var req seekJSON
	if err := decodeObject(body, &req); err != nil {
		return Seek{}, err
	}
	out := Seek{Group: store.DefaultGroup, Partition: req.Partition}
	if req.Group != "" {
		if err := ValidateName("group", req.Group); err != nil {
			return Seek{}, err
		}
		out.Group = req.Group
	}
	if req.Partition != "" {
		if err := ValidateName("partition", req.Partition); err != nil {
			return Seek{}, err
		}
	}
	switch req.To {
	case "start":
		out.To = store.From{Kind: "all"}
	case "end":
		out.To = store.From{Kind: "new"}
	case "":
		return Seek{}, badRequest("to: required: start, end or an RFC 3339 time")
	default:
		t, err := time.Parse(time.RFC3339Nano, req.To)
		if err != nil {
			return Seek{}, badRequest("to: %q is not start, end or an RFC 3339 time", req.To)
		}
		out.To = store.From{Kind: "time", Time: t}
	}
	return out, nil
}
