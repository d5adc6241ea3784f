package comb

import (
	"context"
	"time"

	"github.com/combmq/comb/protocol"
)

// Values of SeekOptions.To; SeekTime makes the third kind.
const (
	// SeekStart moves cursors to the oldest retained message.
	SeekStart = protocol.SeekStart
	// SeekEnd moves cursors past the newest message: only later pushes
	// are delivered.
	SeekEnd = protocol.SeekEnd
)

// SeekTime returns a SeekOptions.To that moves cursors to the first message
// created at or after t.
func SeekTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// SeekOptions are the options of Client.Seek.
type SeekOptions struct {
	// Group is the consumer group whose cursors move; empty means
	// DefaultGroup. A group that does not exist is created.
	Group string
	// Partition restricts the seek to one partition; empty means every
	// partition of the queue.
	Partition string
	// To is SeekStart, SeekEnd or SeekTime(t); it is required.
	To string
}

// Seek moves a consumer group's cursors and ends the group's leases there
// (acks under them then settle nothing). It returns how many cursors moved.
// Seeking back delivers messages again, from attempt 1.
func (c *Client) Seek(ctx context.Context, queue string, opts SeekOptions) (int, error) {
	var rep protocol.SeekReply
	req := protocol.SeekRequest{Group: opts.Group, Partition: opts.Partition, To: opts.To}
	if err := c.request(ctx, protocol.VerbSeek, queue, req, nil, 0, &rep); err != nil {
		return 0, err
	}
	return rep.Moved, nil
}
