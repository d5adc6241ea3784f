package comb

import (
	"context"

	"github.com/combmq/comb/protocol"
)

// PeekQuery selects what Client.Peek reads: Limit messages of Partition
// from offset From, or, with ID, the one message of that producer id.
type PeekQuery struct {
	// Partition is the partition read; empty means DefaultPartition.
	Partition string
	// From is the first offset read. Offsets below the partition's low
	// offset were removed by retention: the page then starts at the low
	// offset. Not sent with ID.
	From int64
	// Limit is the most messages returned, at most protocol.MaxPeekLimit;
	// 0 means protocol.DefaultPeekLimit. Not sent with ID.
	Limit int
	// ID finds the message of this producer id instead, through the
	// queue's dedup window: a queue with dedup_window_s 0 remembers no ids
	// and answers ErrNotFound.
	ID string
}

// PeekPage is one page of Client.Peek.
type PeekPage struct {
	// Messages are in offset order. Nothing is leased: Lease is empty and
	// Attempt is 0.
	Messages []Delivery
	// Next is the From of the next page, or -1 when the partition holds
	// nothing more now (later pushes may add to it).
	Next int64
}

// Peek reads messages of a queue's partition without leasing them or
// changing anything: no group sees a difference. Page with Next:
//
//	for q := (comb.PeekQuery{Partition: "eu"}); ; {
//		page, err := c.Peek(ctx, "orders", q)
//		…
//		if page.Next < 0 {
//			break
//		}
//		q.From = page.Next
//	}
func (c *Client) Peek(ctx context.Context, queue string, q PeekQuery) (PeekPage, error) {
	req := protocol.PeekRequest{Partition: q.Partition, ID: q.ID}
	if q.ID == "" {
		if q.From != 0 {
			req.From = &q.From
		}
		req.Limit = optInt(q.Limit)
	}
	var rep protocol.PeekReply
	if err := c.request(ctx, protocol.VerbPeek, queue, req, nil, 0, &rep); err != nil {
		return PeekPage{}, err
	}
	page := PeekPage{Messages: make([]Delivery, 0, len(rep.Messages)), Next: -1}
	if rep.Next != nil {
		page.Next = *rep.Next
	}
	for _, m := range rep.Messages {
		d, err := delivery(protocol.Delivery{Partition: m.Partition, Offset: m.Offset, ID: m.ID,
			CreatedAt: m.CreatedAt, Headers: m.Headers, Data: m.Data, DataB64: m.DataB64})
		if err != nil {
			return PeekPage{}, err
		}
		page.Messages = append(page.Messages, d)
	}
	return page, nil
}
