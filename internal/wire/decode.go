package wire

import (
	"encoding/base64"
	"strconv"
	"sync"
	"time"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
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

// DefaultLimits returns the protocol's bounds: protocol.MaxMessageBytes and
// protocol.MaxRequestBytes.
func DefaultLimits() Limits {
	return Limits{MaxMessageBytes: protocol.MaxMessageBytes, MaxRequestBytes: protocol.MaxRequestBytes}
}

func (l Limits) checkRequest(body []byte) error {
	if l.MaxRequestBytes > 0 && len(body) > l.MaxRequestBytes {
		return protocol.Errorf(protocol.CodeTooLarge, "request is %d bytes, over the limit of %d", len(body), l.MaxRequestBytes)
	}
	return nil
}

// DecodePush decodes and checks a push body:
// {"messages":[{"partition":"eu","id":"x","data":<JSON>}, {"data_b64":"…"}]}.
//
// Each message carries exactly one of "data" (any JSON value, kept byte for
// byte) or "data_b64" (standard base64, padded or not). A message with
// neither is a 400: an empty message is pushed as "data_b64": "". A partition
// left out (or "") is protocol.DefaultPartition. A partition or id that is
// not valid UTF-8 (or holds a lone surrogate escape) is a 400 naming it,
// never stored under a replacement character. A request over
// lim.MaxRequestBytes, a message over lim.MaxMessageBytes, or more than
// protocol.MaxPushMessages messages is a 413. Each message's Encoding is
// set, so that no pop has to look at its bytes again.
func DecodePush(body []byte, lim Limits) ([]domain.PushMessage, error) {
	if err := lim.checkRequest(body); err != nil {
		return nil, err
	}
	buf := rawPool.Get().(*[]rawMessage)
	room := *buf
	raw, err := parsePush(body, room)
	var msgs []domain.PushMessage
	if err == nil {
		msgs, err = toPushMessages(raw, lim)
	}
	// The parsed messages point into body: clear them before the room
	// goes back, so that the pool holds no request. A failed parse says
	// not how far it got.
	if raw == nil {
		clear(room[:cap(room)])
	} else {
		clear(raw)
		room = raw
	}
	if cap(room) <= maxPooledRaw {
		*buf = room[:0]
		rawPool.Put(buf)
	}
	return msgs, err
}

// rawPool keeps the parser's room for messages between pushes: growing
// it afresh for every push was most of what a push's decoding allocated
// (BenchmarkDecodePushStrings). A room for more than maxPooledRaw
// messages is left to the collector.
var rawPool = sync.Pool{New: func() any { s := make([]rawMessage, 0, 128); return &s }}

const maxPooledRaw = 4096

// DecodePut checks a put: the body is the message; its NATS headers carry
// the options Comb-Partition, Comb-Id, Comb-Delay-Ms and Comb-Not-Before
// (names matched without regard to case), and every other header is kept
// with the message.
func DecodePut(body []byte, h map[string][]string, lim Limits) (domain.PushMessage, error) {
	if err := lim.checkRequest(body); err != nil {
		return domain.PushMessage{}, err
	}
	opts, rest, err := splitPutHeaders(h)
	if err != nil {
		return domain.PushMessage{}, err
	}
	pm, err := checkMessage(opts[protocol.HeaderPartition], opts[protocol.HeaderID], protocol.HeaderPartition+" header", protocol.HeaderID+" header")
	if err != nil {
		return domain.PushMessage{}, err
	}
	delay, err := putDelay(opts[protocol.HeaderDelayMS])
	if err != nil {
		return domain.PushMessage{}, err
	}
	if err := checkExtras(&pm, rest, delay, opts[protocol.HeaderNotBefore], time.Now(), putHoldFields); err != nil {
		return domain.PushMessage{}, err
	}
	pm.Data = body
	if pm.Data == nil {
		pm.Data = []byte{}
	}
	pm.Encoding = EncodingOf(pm.Data)
	if lim.MaxMessageBytes > 0 && pm.Size() > lim.MaxMessageBytes {
		return domain.PushMessage{}, protocol.Errorf(protocol.CodeTooLarge, "message is %d bytes with its headers, over the limit of %d", pm.Size(), lim.MaxMessageBytes)
	}
	return pm, nil
}

// EncodingOf says how a reply carries data: domain.EncodingJSON when
// IsJSONData, else domain.EncodingBinary.
func EncodingOf(data []byte) domain.Encoding {
	if IsJSONData(data) {
		return domain.EncodingJSON
	}
	return domain.EncodingBinary
}

// checkMessage checks a message's partition and id and returns the message
// without data. Errors name the field bare ("partition: …"); callers add
// where the message is.
func checkMessage(partition, id, partitionField, idField string) (domain.PushMessage, error) {
	pm := domain.PushMessage{Partition: partition, ID: id}
	if partition == "" {
		pm.Partition = protocol.DefaultPartition
	} else if err := protocol.ValidateText(partitionField, partition, protocol.MaxNameBytes); err != nil {
		return pm, err
	}
	if id != "" {
		if err := protocol.ValidateText(idField, id, protocol.MaxIDBytes); err != nil {
			return pm, err
		}
	}
	return pm, nil
}

// prefixError puts where in front of a field error: "messages[3].partition: …".
func prefixError(where string, err error) error {
	if we, ok := protocol.AsError(err); ok {
		return protocol.Errorf(we.Code, "%s.%s", where, we.Message)
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

func isSyntax(we *protocol.Error) bool {
	return len(we.Message) >= 9 && we.Message[:9] == "malformed"
}

// Pop is a decoded pop request.
type Pop struct {
	// Params are the store's; Queue is left for the caller.
	Params domain.PopParams
	// Wait is how long to long-poll when nothing is ready.
	Wait time.Duration
	// Acks are the acks of Params.Group the pop settles first, if any.
	Acks []domain.Ack
}

// DecodePop decodes and checks a pop body (protocol.PopRequest); every
// field is optional and an empty body is valid. Bounds: max
// 1..protocol.MaxPopMessages (default protocol.DefaultPopMax), partitions
// 1..protocol.MaxPopPartitions (default 1, and 1 when a partition is
// named), wait_ms 0..protocol.MaxWaitMS, lease_ms 0 (the queue's) or
// protocol.MinLeaseMS..MaxLeaseMS, from "all", "new" or an RFC 3339 time. A
// group or partition given as "" means the default.
func DecodePop(body []byte) (Pop, error) {
	var req protocol.PopRequest
	if err := decodeWithAcks(body, &req); err != nil {
		return Pop{}, err
	}
	p := Pop{Params: domain.PopParams{
		Group:      protocol.DefaultGroup,
		Partition:  req.Partition,
		Max:        protocol.DefaultPopMax,
		Partitions: protocol.DefaultPopPartitions,
		AutoAck:    req.AutoAck,
	}}
	if req.Group != "" {
		if err := protocol.ValidateName("group", req.Group); err != nil {
			return Pop{}, err
		}
		p.Params.Group = req.Group
	}
	if req.Partition != "" {
		if err := protocol.ValidateName("partition", req.Partition); err != nil {
			return Pop{}, err
		}
	}
	if req.Max != nil {
		if err := checkRange("max", int64(*req.Max), 1, protocol.MaxPopMessages); err != nil {
			return Pop{}, err
		}
		p.Params.Max = *req.Max
	}
	if req.Partitions != nil {
		if err := checkRange("partitions", int64(*req.Partitions), 1, protocol.MaxPopPartitions); err != nil {
			return Pop{}, err
		}
		if req.Partition != "" && *req.Partitions != 1 {
			return Pop{}, badRequest("partitions: must be 1 when a partition is named")
		}
		p.Params.Partitions = *req.Partitions
	}
	if err := checkRange("wait_ms", req.WaitMS, 0, protocol.MaxWaitMS); err != nil {
		return Pop{}, err
	}
	p.Wait = time.Duration(req.WaitMS) * time.Millisecond
	if err := checkLease("lease_ms", req.LeaseMS); err != nil {
		return Pop{}, err
	}
	p.Params.LeaseMS = req.LeaseMS
	from, err := ParseFrom(req.From)
	if err != nil {
		return Pop{}, err
	}
	p.Params.From = from
	if p.Acks, err = checkAcks(req.Acks); err != nil {
		return Pop{}, err
	}
	return p, nil
}

// decodeWithAcks decodes the body of a request with an "acks" array (an
// ack's, a pop's) into v; an error in one of the acks names it, acks[i].
func decodeWithAcks(body []byte, v any) error {
	err := decodeObject(body, v)
	if err == nil {
		return nil
	}
	if we, _ := protocol.AsError(err); we != nil && !isSyntax(we) {
		if located := decodeElements(body, "acks", func() any { return new(protocol.Ack) }); located != nil {
			return located
		}
	}
	return err
}

// checkAcks checks the acks of a request that may carry none (a pop's),
// as DecodeAck checks its own.
func checkAcks(acks []protocol.Ack) ([]domain.Ack, error) {
	if len(acks) == 0 {
		return nil, nil
	}
	if len(acks) > protocol.MaxAcks {
		return nil, protocol.Errorf(protocol.CodeTooLarge, "acks: %d acks, at most %d per request", len(acks), protocol.MaxAcks)
	}
	out := make([]domain.Ack, len(acks))
	for i, a := range acks {
		ack, err := checkAck(i, a)
		if err != nil {
			return nil, err
		}
		out[i] = ack
	}
	return out, nil
}

// DecodeNamespacePop decodes and checks the body of a namespace pop
// (protocol.VerbNamespacePop): a pop body as DecodePop takes it, without
// partition, since a namespace's queues share no partitions.
func DecodeNamespacePop(body []byte) (Pop, error) {
	p, err := DecodePop(body)
	if err != nil {
		return Pop{}, err
	}
	if p.Params.Partition != "" {
		return Pop{}, badRequest("partition: not allowed in a namespace pop; pop the queue itself to name a partition")
	}
	if len(p.Acks) > 0 {
		return Pop{}, badRequest("acks: not allowed in a namespace pop; ack on each message's queue")
	}
	return p, nil
}

// ParseFrom parses a pop's from: "" or "all", "new", or an RFC 3339 time.
func ParseFrom(s string) (domain.Start, error) {
	switch s {
	case "", protocol.FromAll:
		return domain.Start{Kind: domain.StartAll}, nil
	case protocol.FromNew:
		return domain.Start{Kind: domain.StartNew}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return domain.Start{}, badRequest("from: %q is not all, new or an RFC 3339 time", s)
	}
	return domain.Start{Kind: domain.StartTime, Time: t}, nil
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
	if v < protocol.MinLeaseMS || v > protocol.MaxLeaseMS {
		return badRequest("%s: %d is out of range: 0 (the queue's lease) or %d..%d", field, v, protocol.MinLeaseMS, protocol.MaxLeaseMS)
	}
	return nil
}

// ackStatuses maps the wire's ack statuses to the domain's.
var ackStatuses = map[string]domain.AckStatus{
	"":                    domain.AckCompleted,
	protocol.AckCompleted: domain.AckCompleted,
	protocol.AckRetry:     domain.AckRetry,
	protocol.AckFailed:    domain.AckFailed,
	protocol.AckDead:      domain.AckDead,
}

// DecodeAck decodes and checks an ack body (protocol.AckRequest):
// {"group":"g","acks":[{"partition":"p","offset":17,"lease":"l","status":"completed"}]}.
// It returns the group (protocol.DefaultGroup when omitted) and the acks.
// Each ack needs an offset and a lease; partition defaults like a push's,
// status to completed. An unknown status fails the whole request, so that a
// client never believes a typo settled anything. delay_ms (0..MaxDelayMS)
// is only for retry and failed, error (printable UTF-8, at most
// MaxAckErrorBytes) only for failed and dead; elsewhere each is a 400.
func DecodeAck(body []byte) (string, []domain.Ack, error) {
	var req protocol.AckRequest
	if err := decodeWithAcks(body, &req); err != nil {
		return "", nil, err
	}
	group := protocol.DefaultGroup
	if req.Group != "" {
		if err := protocol.ValidateName("group", req.Group); err != nil {
			return "", nil, err
		}
		group = req.Group
	}
	if len(req.Acks) == 0 {
		return "", nil, badRequest("acks: at least one ack is required")
	}
	out, err := checkAcks(req.Acks)
	if err != nil {
		return "", nil, err
	}
	return group, out, nil
}

// checkAck checks ack i of a request (an ack's or a transaction's) and
// fills its defaults; errors name it "acks[i]".
func checkAck(i int, a protocol.Ack) (domain.Ack, error) {
	ack := domain.Ack{Partition: a.Partition, Lease: a.Lease}
	if ack.Partition == "" {
		ack.Partition = protocol.DefaultPartition
	} else if err := protocol.ValidateName("partition", a.Partition); err != nil {
		return ack, prefixError("acks["+strconv.Itoa(i)+"]", err)
	}
	if a.Offset == nil {
		return ack, badRequest("acks[%d].offset: required", i)
	}
	if *a.Offset < 0 {
		return ack, badRequest("acks[%d].offset: %d is negative", i, *a.Offset)
	}
	ack.Offset = *a.Offset
	if p := leaseProblem(a.Lease); p != "" {
		return ack, badRequest("acks[%d].lease: %s", i, p)
	}
	status, ok := ackStatuses[a.Status]
	if !ok {
		return ack, badRequest("acks[%d].status: unknown status %q; want completed, retry, failed or dead", i, a.Status)
	}
	ack.Status = status
	if a.DelayMS != nil {
		if status != domain.AckRetry && status != domain.AckFailed {
			return ack, badRequest("acks[%d].delay_ms: only with status retry or failed", i)
		}
		if err := checkRange("acks["+strconv.Itoa(i)+"].delay_ms", *a.DelayMS, 0, protocol.MaxDelayMS); err != nil {
			return ack, err
		}
		ack.DelayMS = a.DelayMS
	}
	if a.Error != "" {
		if status != domain.AckFailed && status != domain.AckDead {
			return ack, badRequest("acks[%d].error: only with status failed or dead", i)
		}
		if err := protocol.ValidateText("acks["+strconv.Itoa(i)+"].error", a.Error, protocol.MaxAckErrorBytes); err != nil {
			return ack, err
		}
		ack.Error = a.Error
	}
	return ack, nil
}

// leaseProblem says what is wrong with a lease string, or "".
func leaseProblem(l string) string {
	switch {
	case l == "":
		return "required"
	case len(l) > protocol.MaxLeaseBytes:
		return "longer than " + strconv.Itoa(protocol.MaxLeaseBytes) + " bytes"
	}
	return ""
}

// DecodeRenew decodes and checks a renew body,
// {"leases":["l-1"],"lease_ms":30000}: one or more leases, and lease_ms 0
// (the queue's lease time) or 100..86400000.
func DecodeRenew(body []byte) ([]string, int64, error) {
	var req protocol.RenewRequest
	if err := decodeObject(body, &req); err != nil {
		return nil, 0, err
	}
	if len(req.Leases) == 0 {
		return nil, 0, badRequest("leases: at least one lease is required")
	}
	if len(req.Leases) > protocol.MaxLeases {
		return nil, 0, protocol.Errorf(protocol.CodeTooLarge, "leases: %d leases, at most %d per request", len(req.Leases), protocol.MaxLeases)
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

// DecodeConfigure decodes and checks a configure body
// (protocol.ConfigPatch) into a patch: only the fields given change.
// Unknown fields and out-of-range values are a 400 naming the field (the
// ranges are domain.QueueConfig.Validate's); an empty body (or {}) creates
// the queue with defaults, or returns its settings unchanged.
func DecodeConfigure(body []byte) (domain.ConfigPatch, error) {
	var p protocol.ConfigPatch
	if err := decodeObject(body, &p); err != nil {
		return domain.ConfigPatch{}, err
	}
	patch := domain.ConfigPatch(p)
	if err := patch.Validate(); err != nil {
		return domain.ConfigPatch{}, badRequest("%s", err.Error())
	}
	return patch, nil
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
	// Params are the listing's (Op DLQList); Queue is left for the caller.
	Params domain.DLQParams
	// IDs are the dead letters to replay or purge.
	IDs []string
}

// DecodeDLQ decodes and checks a dlq body: a listing
// {"group":"g","limit":100,"after":"<cursor>"} (all optional; limit
// 1..1000, default 100), or {"replay":[ids]}, or {"purge":[ids]}. Replay and
// purge take no other field.
func DecodeDLQ(body []byte) (DLQ, error) {
	var req protocol.DLQRequest
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
		case len(ids) > protocol.MaxDLQIDs:
			return DLQ{}, protocol.Errorf(protocol.CodeTooLarge, "%s: %d ids, at most %d per request", op, len(ids), protocol.MaxDLQIDs)
		}
		for i, id := range ids {
			if id == "" || len(id) > protocol.MaxLeaseBytes {
				return DLQ{}, badRequest("%s[%d]: not a dlq_id", op, i)
			}
		}
		return DLQ{Op: op, IDs: ids}, nil
	}
	d := DLQ{Op: DLQList, Params: domain.DLQParams{Group: req.Group, Limit: protocol.DefaultDLQLimit, After: req.After}}
	if req.Group != "" {
		if err := protocol.ValidateName("group", req.Group); err != nil {
			return DLQ{}, err
		}
	}
	if req.Limit != nil {
		if err := checkRange("limit", int64(*req.Limit), 1, protocol.MaxDLQLimit); err != nil {
			return DLQ{}, err
		}
		d.Params.Limit = *req.Limit
	}
	return d, nil
}

// DecodeSeek decodes and checks a seek body (protocol.SeekRequest):
// {"group":"g","partition":"p","to":"start"|"end"|"<RFC 3339 time>"}.
// group defaults like a pop's; partition is optional (every partition);
// to is required, so that a bare request never rewinds a group by accident.
// The Queue of the result is left for the caller.
func DecodeSeek(body []byte) (domain.SeekParams, error) {
	var req protocol.SeekRequest
	if err := decodeObject(body, &req); err != nil {
		return domain.SeekParams{}, err
	}
	out := domain.SeekParams{Group: protocol.DefaultGroup, Partition: req.Partition}
	if req.Group != "" {
		if err := protocol.ValidateName("group", req.Group); err != nil {
			return domain.SeekParams{}, err
		}
		out.Group = req.Group
	}
	if req.Partition != "" {
		if err := protocol.ValidateName("partition", req.Partition); err != nil {
			return domain.SeekParams{}, err
		}
	}
	switch req.To {
	case protocol.SeekStart:
		out.To = domain.Start{Kind: domain.StartAll}
	case protocol.SeekEnd:
		out.To = domain.Start{Kind: domain.StartNew}
	case "":
		return domain.SeekParams{}, badRequest("to: required: start, end or an RFC 3339 time")
	default:
		t, err := time.Parse(time.RFC3339Nano, req.To)
		if err != nil {
			return domain.SeekParams{}, badRequest("to: %q is not start, end or an RFC 3339 time", req.To)
		}
		out.To = domain.Start{Kind: domain.StartTime, Time: t}
	}
	return out, nil
}

// DecodeGroups decodes and checks a groups body (protocol.GroupsRequest):
// empty or {} lists the groups and returns ""; {"delete":"<group>"} returns
// the group to delete, a valid group name (an empty one is a 400, so that a
// bad delete is never taken for a listing).
func DecodeGroups(body []byte) (deleteGroup string, err error) {
	var req struct {
		Delete *string `json:"delete"`
	}
	if err := decodeObject(body, &req); err != nil {
		return "", err
	}
	if req.Delete == nil {
		return "", nil
	}
	if *req.Delete == "" {
		return "", badRequest("delete: the group to delete is required")
	}
	if err := protocol.ValidateName("delete", *req.Delete); err != nil {
		return "", err
	}
	return *req.Delete, nil
}

// DecodePeek decodes and checks a peek body (protocol.PeekRequest):
// {"partition":"eu","from":0,"limit":100} or {"partition":"eu","id":"x"}.
// partition defaults like a push's; from defaults to 0 and limit to
// protocol.DefaultPeekLimit; id takes neither from nor limit. The Queue of
// the result is left for the caller.
func DecodePeek(body []byte) (domain.PeekParams, error) {
	var req protocol.PeekRequest
	if err := decodeObject(body, &req); err != nil {
		return domain.PeekParams{}, err
	}
	pm, err := checkMessage(req.Partition, req.ID, "partition", "id")
	if err != nil {
		return domain.PeekParams{}, err
	}
	out := domain.PeekParams{Partition: pm.Partition, ID: pm.ID, Limit: protocol.DefaultPeekLimit}
	if req.ID != "" {
		if req.From != nil || req.Limit != nil {
			return domain.PeekParams{}, badRequest("id: takes no from or limit")
		}
		out.Limit = 1
		return out, nil
	}
	if req.From != nil {
		if *req.From < 0 {
			return domain.PeekParams{}, badRequest("from: %d is negative; offsets start at 0", *req.From)
		}
		out.From = *req.From
	}
	if req.Limit != nil {
		if err := checkRange("limit", int64(*req.Limit), 1, protocol.MaxPeekLimit); err != nil {
			return domain.PeekParams{}, err
		}
		out.Limit = *req.Limit
	}
	return out, nil
}
