package wire

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// Info and list replies are paged: each holds at most its request's limit
// of names, and no more than fits in the byte budget the caller gives (the
// connection's max_payload), so no reply is ever dropped for its size.

// An info cursor records two positions, the partitions' and the groups':
// a flags byte (infoPartitionsDone, infoGroupsDone), the partition name's
// length as a uvarint, the partition name and then the group name, all in
// unpadded URL-safe base64. It is opaque to clients.
const (
	infoPartitionsDone = 1 << iota
	infoGroupsDone
)

// replyReserve is room kept in a paged reply for its closing
// `],"next":"…"}`: the longest cursor of two names is about 700 bytes.
const replyReserve = 800

// DecodeInfo decodes and checks an info body (protocol.InfoRequest): empty
// or {} for the first page, {"limit":N,"after":"<next>"} for others. The
// Queue of the result is left for the caller.
func DecodeInfo(body []byte) (domain.InfoParams, error) {
	var req protocol.InfoRequest
	if err := decodeObject(body, &req); err != nil {
		return domain.InfoParams{}, err
	}
	out := domain.InfoParams{Limit: protocol.DefaultInfoLimit}
	if req.Limit != nil {
		if err := checkRange("limit", int64(*req.Limit), 1, protocol.MaxInfoLimit); err != nil {
			return domain.InfoParams{}, err
		}
		out.Limit = *req.Limit
	}
	if req.After != "" {
		var err error
		if out.Partitions, out.Groups, err = DecodeInfoCursor(req.After); err != nil {
			return domain.InfoParams{}, err
		}
	}
	return out, nil
}

// DecodeInfoCursor decodes the next of an info reply into where its
// partitions and its groups resume; anything else is a 400.
func DecodeInfoCursor(s string) (partitions, groups domain.PageAt, err error) {
	bad := badRequest("after: not a cursor of an info reply; send the next of the previous page")
	if len(s) > protocol.MaxCursorBytes {
		return partitions, groups, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0]&^(infoPartitionsDone|infoGroupsDone) != 0 {
		return partitions, groups, bad
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n > uint64(len(b)-1-w) {
		return partitions, groups, bad
	}
	rest := b[1+w:]
	partitions = domain.PageAt{After: string(rest[:n]), Done: b[0]&infoPartitionsDone != 0}
	groups = domain.PageAt{After: string(rest[n:]), Done: b[0]&infoGroupsDone != 0}
	// A cursor names only what a page could have listed.
	for _, at := range []domain.PageAt{partitions, groups} {
		if len(at.After) > protocol.MaxNameBytes || (at.Done && at.After != "") {
			return domain.PageAt{}, domain.PageAt{}, bad
		}
	}
	return partitions, groups, nil
}

func encodeInfoCursor(partitions, groups domain.PageAt) string {
	if partitions.Done && groups.Done {
		return ""
	}
	var flags byte
	if partitions.Done {
		flags |= infoPartitionsDone
		partitions.After = ""
	}
	if groups.Done {
		flags |= infoGroupsDone
		groups.After = ""
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(partitions.After)+len(groups.After))
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(partitions.After)))
	b = append(b, partitions.After...)
	b = append(b, groups.After...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// advance returns where a listing resumes after a page that held the
// first kept of names, resuming at at, when more names follow the page.
func advance[T any](at domain.PageAt, items []T, kept int, more bool, name func(*T) string) domain.PageAt {
	switch {
	case at.Done:
		return at
	case kept == len(items) && !more:
		return domain.PageAt{Done: true}
	case kept == 0:
		return at
	}
	return domain.PageAt{After: name(&items[kept-1])}
}

// fit returns how many of items fit in budget, each costing its JSON
// size and a comma, and what is left of budget.
func fit[T any](items []T, budget int, conv func(*T) any) (int, int) {
	for i := range items {
		b, err := json.Marshal(conv(&items[i]))
		if err != nil {
			panic(err)
		}
		if len(b)+1 > budget {
			return i, budget
		}
		budget -= len(b) + 1
	}
	return len(items), budget
}

// InfoReply returns an info reply, protocol.Info, for a page read by at:
// as many of its partitions, then of its groups, as fit in maxBytes (no
// bound when 0), and the cursor of the rest. It also returns how many
// names it kept; 0 while the page had some means not even one fits.
func InfoReply(info domain.Info, at domain.InfoParams, maxBytes int) ([]byte, int) {
	out := protocol.Info{
		Name: info.Name, Config: protocol.QueueConfig(info.Config), CreatedAt: info.CreatedAt.UTC(),
		Messages: info.Messages, Bytes: info.Bytes, DeadLetters: info.DeadLetters,
		PartitionCount: info.PartitionCount, GroupCount: info.GroupCount,
		Partitions: []protocol.PartitionInfo{}, Groups: []protocol.GroupInfo{},
	}
	kp, kg := len(info.Partitions), len(info.Groups)
	if maxBytes > 0 {
		budget := maxBytes - len(marshal(out)) - replyReserve
		kp, budget = fit(info.Partitions, budget, func(p *domain.PartitionInfo) any { return protocol.PartitionInfo(*p) })
		kg = 0
		if kp == len(info.Partitions) {
			kg, _ = fit(info.Groups, budget, func(g *domain.GroupInfo) any { return protocol.GroupInfo(*g) })
		}
	}
	for _, p := range info.Partitions[:kp] {
		out.Partitions = append(out.Partitions, protocol.PartitionInfo(p))
	}
	for _, g := range info.Groups[:kg] {
		out.Groups = append(out.Groups, protocol.GroupInfo(g))
	}
	out.Next = encodeInfoCursor(
		advance(at.Partitions, info.Partitions, kp, info.MorePartitions, func(p *domain.PartitionInfo) string { return p.Name }),
		advance(at.Groups, info.Groups, kg, info.MoreGroups, func(g *domain.GroupInfo) string { return g.Name }))
	return marshal(out), kp + kg
}

// DecodeList decodes and checks a list body (protocol.ListRequest): empty
// or {} for the first page, {"limit":N,"after":"<next>"} for others. The
// Tenant of the result is left for the caller.
func DecodeList(body []byte) (domain.ListParams, error) {
	var req protocol.ListRequest
	if err := decodeObject(body, &req); err != nil {
		return domain.ListParams{}, err
	}
	out := domain.ListParams{Limit: protocol.DefaultListLimit, After: req.After}
	if req.Limit != nil {
		if err := checkRange("limit", int64(*req.Limit), 1, protocol.MaxListLimit); err != nil {
			return domain.ListParams{}, err
		}
		out.Limit = *req.Limit
	}
	// A list's cursor is the last queue name of the page before.
	if len(req.After) > protocol.MaxQueueBytes {
		return domain.ListParams{}, badRequest("after: not a cursor of a list reply; send the next of the previous page")
	}
	return out, nil
}

// ListReply returns a list reply, protocol.ListReply: as many of the
// page's queues as fit in maxBytes (no bound when 0) and the cursor of the
// rest. It also returns how many it kept, as InfoReply does.
func ListReply(list domain.QueueList, maxBytes int) ([]byte, int) {
	kept := len(list.Queues)
	if maxBytes > 0 {
		kept, _ = fit(list.Queues, maxBytes-len(`{"queues":[],"next":""}`)-replyReserve,
			func(q *domain.QueueSummary) any { return protocol.QueueSummary(*q) })
	}
	out := protocol.ListReply{Queues: make([]protocol.QueueSummary, kept)}
	for i, q := range list.Queues[:kept] {
		out.Queues[i] = protocol.QueueSummary(q)
	}
	if next := advance(domain.PageAt{}, list.Queues, kept, list.More, func(q *domain.QueueSummary) string { return q.Name }); !next.Done {
		out.Next = next.After
	}
	return marshal(out), kept
}
