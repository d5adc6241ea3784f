package store

import (
	"context"
	"errors"
)

var errNotImplemented = errors.New("store: not implemented yet")

// Push appends the requests' messages in one transaction and fills each
// request's Results, or its Err when that request alone was refused (a
// limit, a too-large message). It returns an error, and sets every Err, when
// the transaction itself failed. A queue that does not exist is created with
// DefaultConfig.
func (s *Store) Push(ctx context.Context, reqs []*PushRequest) error {
	return errNotImplemented
}

// Pop leases the next messages of a queue for a group. It returns no
// messages and no error when nothing is ready; ErrNotFound when the queue
// does not exist.
func (s *Store) Pop(ctx context.Context, req PopRequest) ([]Message, error) {
	return nil, errNotImplemented
}

// Ack settles the requests' acks in as few transactions as it can and fills
// each request's Results or Err.
func (s *Store) Ack(ctx context.Context, reqs []*AckRequest) error {
	return errNotImplemented
}

// Renew extends live leases of a queue by leaseMS (0: the queue's lease_ms).
func (s *Store) Renew(ctx context.Context, queue string, leases []string, leaseMS int64) ([]RenewResult, error) {
	return nil, errNotImplemented
}

// Configure creates the queue if needed, merges patch into its settings and
// returns them. An out-of-range value is an ErrInvalid naming the field.
func (s *Store) Configure(ctx context.Context, name string, patch ConfigPatch) (Config, error) {
	return Config{}, errNotImplemented
}

// Info returns a queue's settings and figures, or ErrNotFound.
func (s *Store) Info(ctx context.Context, name string) (Info, error) {
	return Info{}, errNotImplemented
}

// List returns every queue, ordered by name.
func (s *Store) List(ctx context.Context) ([]QueueSummary, error) {
	return nil, errNotImplemented
}

// Delete removes a queue and all its data, or returns ErrNotFound.
func (s *Store) Delete(ctx context.Context, name string) error {
	return errNotImplemented
}

// DeadLetters lists a queue's dead letters, oldest first, and the cursor of
// the next page ("" at the end).
func (s *Store) DeadLetters(ctx context.Context, q DLQQuery) ([]DeadLetter, string, error) {
	return nil, "", errNotImplemented
}

// ReplayDeadLetters pushes the chosen dead letters again into their
// partitions as new messages and removes them from the list.
func (s *Store) ReplayDeadLetters(ctx context.Context, queue string, ids []string) (int, error) {
	return 0, errNotImplemented
}

// PurgeDeadLetters removes the chosen dead letters.
func (s *Store) PurgeDeadLetters(ctx context.Context, queue string, ids []string) (int, error) {
	return 0, errNotImplemented
}
