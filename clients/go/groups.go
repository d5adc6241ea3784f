package comb

import (
	"context"
	"fmt"

	"github.com/combmq/comb/protocol"
)

// GroupState is one consumer group's lag over a queue, a line of
// Client.Groups: the wire form (OldestPendingAgeS is in seconds).
type GroupState = protocol.GroupState

// Groups returns a queue's consumer groups, ordered by name: per group the
// messages it has not completed, the partitions it holds a lease on, its
// dead letters and the age of its oldest pending message. ErrNotFound when
// the queue does not exist.
func (c *Client) Groups(ctx context.Context, queue string) ([]GroupState, error) {
	var rep protocol.GroupsReply
	if err := c.request(ctx, protocol.VerbGroups, queue, nil, nil, 0, &rep); err != nil {
		return nil, err
	}
	return rep.Groups, nil
}

// DeleteGroup deletes a consumer group of a queue with its cursors, leases
// and dead letters, so that it no longer holds back completed retention.
// Acks under its leases then settle nothing; a later pop under its name
// starts the group anew. ErrNotFound when the queue or the group does not
// exist.
func (c *Client) DeleteGroup(ctx context.Context, queue, group string) error {
	if group == "" {
		return fmt.Errorf("comb: delete group of %s: %w: the group is required", queue, ErrBadRequest)
	}
	return c.request(ctx, protocol.VerbGroups, queue, protocol.GroupsRequest{Delete: group}, nil, 0, nil)
}
