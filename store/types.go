package store

import (
	"errors"
	"time"
)

// Sentinel errors callers branch on. The bridge maps them to wire codes:
// ErrInvalid 400, ErrNotFound 404, ErrConflict 409, ErrTooLarge 413,
// ErrLimit 429, ErrUnavailable 503.
var (
	ErrInvalid     = errors.New("invalid request")
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrTooLarge    = errors.New("too large")
	ErrLimit       = errors.New("limit reached")
	ErrUnavailable = errors.New("postgresql unavailable")
)

// DefaultPartition is the partition of a message pushed without one.
const DefaultPartition = "default"

// DefaultGroup is the consumer group of a pop or ack that names none.
const DefaultGroup = "default"

// Config is a queue's settings. Field names match the wire protocol.
type Config struct {
	LeaseMS             int64 `json:"lease_ms"`
	MaxAttempts         int64 `json:"max_attempts"`
	DeadLetter          bool  `json:"dead_letter"`
	DedupWindowS        int64 `json:"dedup_window_s"`
	CompletedRetentionS int64 `json:"completed_retention_s"`
	MaxAgeS             int64 `json:"max_age_s"`
	DelayMS             int64 `json:"delay_ms"`
	MaxMessages         int64 `json:"max_messages"`
	MaxBytes            int64 `json:"max_bytes"`
	MaxMessageBytes     int64 `json:"max_message_bytes"`
}

// DefaultConfig returns the settings of a queue nobody configured. A queue
// created by a push and one created by configure both start from it.
func DefaultConfig() Config {
	return Config{
		LeaseMS:         30000,
		MaxAttempts:     3,
		DeadLetter:      true,
		MaxMessageBytes: 1 << 20,
	}
}

// ConfigPatch is a partial configuration: nil fields are left as they are.
type ConfigPatch struct {
	LeaseMS             *int64 `json:"lease_ms,omitempty"`
	MaxAttempts         *int64 `json:"max_attempts,omitempty"`
	DeadLetter          *bool  `json:"dead_letter,omitempty"`
	DedupWindowS        *int64 `json:"dedup_window_s,omitempty"`
	CompletedRetentionS *int64 `json:"completed_retention_s,omitempty"`
	MaxAgeS             *int64 `json:"max_age_s,omitempty"`
	DelayMS             *int64 `json:"delay_ms,omitempty"`
	MaxMessages         *int64 `json:"max_messages,omitempty"`
	MaxBytes            *int64 `json:"max_bytes,omitempty"`
	MaxMessageBytes     *int64 `json:"max_message_bytes,omitempty"`
}

// Queue is a queue's identity and settings.
type Queue struct {
	ID        int64
	Name      string
	Config    Config
	CreatedAt time.Time
}

// PushMessage is one message of a push request.
type PushMessage struct {
	Partition string // empty means DefaultPartition
	ID        string // optional producer id, for deduplication
	Data      []byte
}

// Push statuses.
const (
	StatusStored    = "stored"
	StatusDuplicate = "duplicate"
	StatusSpooled   = "spooled"
)

// PushResult is the outcome of one pushed message.
type PushResult struct {
	Partition string
	Offset    int64
	Status    string
}

// PushRequest is one client's push. Store.Push fills Results (one per
// message, in order) or Err.
type PushRequest struct {
	Queue    string
	Messages []PushMessage

	Results []PushResult
	Err     error
}

// From says where a group that has never read a partition starts.
type From struct {
	Kind string    // "all" (default), "new" or "time"
	Time time.Time // with Kind "time"
}

// PopRequest asks for the next messages of a queue for a consumer group.
type PopRequest struct {
	Queue      string
	Group      string // empty means DefaultGroup
	Partition  string // empty means any partition with messages ready
	Max        int    // most messages returned; 0 means 100
	Partitions int    // most partitions leased; 0 means 1
	LeaseMS    int64  // 0 means the queue's lease_ms
	AutoAck    bool
	From       From
	// MaxBytes bounds the reply: when the leased messages' SizeOf adds up
	// to more, Pop returns the prefix that fits (at least one message) and
	// shrinks the leases to what it returns, so nothing stays leased unseen.
	// 0 means no bound.
	MaxBytes int
	// SizeOf is a message's size in the reply; nil counts data, id and
	// partition bytes plus 64.
	SizeOf func(*Message) int
}

// Message is a delivered message.
type Message struct {
	Partition string
	Offset    int64
	ID        string
	Lease     string // empty with auto-ack
	Attempt   int
	CreatedAt time.Time
	Data      []byte

	pid int64 // the partition's id, for trimming a pop
}

// Ack statuses.
const (
	AckCompleted = "completed"
	AckRetry     = "retry"
	AckFailed    = "failed"
	AckDead      = "dead"
)

// Ack settles a leased message (and, cumulatively, those before it in its
// lease).
type Ack struct {
	Partition string
	Offset    int64
	Lease     string
	Status    string // empty means AckCompleted
}

// AckResult is the outcome of one Ack.
type AckResult struct {
	OK    bool
	Error string
}

// AckRequest is one client's ack. Store.Ack fills Results or Err.
type AckRequest struct {
	Queue string
	Group string // empty means DefaultGroup
	Acks  []Ack

	Results []AckResult
	Err     error
}

// RenewResult is the outcome of renewing one lease.
type RenewResult struct {
	Lease     string
	OK        bool
	ExpiresAt time.Time
	Error     string
}

// GroupInfo is one consumer group's state over a queue.
type GroupInfo struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"` // messages not yet completed by the group
	Leased  int64  `json:"leased"`  // partitions currently leased
}

// PartitionInfo is one partition's figures.
type PartitionInfo struct {
	Name       string `json:"name"`
	NextOffset int64  `json:"next_offset"`
	LowOffset  int64  `json:"low_offset"`
}

// Info is a queue's settings and live figures.
type Info struct {
	Name        string          `json:"name"`
	Config      Config          `json:"config"`
	CreatedAt   time.Time       `json:"created_at"`
	Messages    int64           `json:"messages"` // retained
	Bytes       int64           `json:"bytes"`    // retained payload bytes
	DeadLetters int64           `json:"dead_letters"`
	Partitions  []PartitionInfo `json:"partitions"`
	Groups      []GroupInfo     `json:"groups"`
}

// QueueSummary is one line of the queue list.
type QueueSummary struct {
	Name       string `json:"name"`
	Partitions int64  `json:"partitions"`
	Messages   int64  `json:"messages"`
	Bytes      int64  `json:"bytes"`
	Groups     int64  `json:"groups"`
	Pending    int64  `json:"pending"` // the largest backlog of any group
}

// DeadLetter is a message that a group gave up on.
type DeadLetter struct {
	DLQID     string
	Group     string
	Partition string
	Offset    int64
	ID        string
	Attempts  int
	Reason    string
	DeadAt    time.Time
	Data      []byte
}

// DLQQuery lists dead letters of a queue, oldest first.
type DLQQuery struct {
	Queue string
	Group string // empty means every group
	Limit int    // 0 means 100
	After string // a cursor from the previous page
}
