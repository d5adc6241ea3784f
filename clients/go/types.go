package comb

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// DefaultPartition is the partition of a message pushed without one.
const DefaultPartition = "default"

// DefaultGroup is the consumer group of a pop or ack that names none.
const DefaultGroup = "default"

// Push statuses, in PushResult.Status.
const (
	// StatusStored: the message is durable in PostgreSQL at Offset.
	StatusStored = "stored"
	// StatusDuplicate: a message with the same ID was already stored in the
	// partition within the queue's dedup window; Offset is the original's.
	StatusDuplicate = "duplicate"
	// StatusSpooled: PostgreSQL was unreachable and the message is durable in
	// the broker's local disk spool; it has no offset yet.
	StatusSpooled = "spooled"
)

// Ack statuses, in Ack.Status.
const (
	// AckCompleted settles the message and every earlier one of its lease.
	AckCompleted = "completed"
	// AckRetry settles the earlier messages of the lease and makes this one
	// and the rest of the lease deliverable again at once, without spending
	// an attempt.
	AckRetry = "retry"
	// AckFailed is like AckRetry but spends an attempt: when the queue's
	// max_attempts are spent the message is dead-lettered.
	AckFailed = "failed"
	// AckDead dead-letters the message at once.
	AckDead = "dead"
)

// Values of PopOptions.From; FromTime makes the third kind.
const (
	// FromAll starts a new group at the oldest retained message.
	FromAll = "all"
	// FromNew starts a new group at the next message pushed.
	FromNew = "new"
)

// FromTime returns a PopOptions.From that starts a new group at the first
// message created at or after t.
func FromTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Message is one message to push.
type Message struct {
	// Partition orders messages: order is kept within a partition only.
	// Empty means DefaultPartition.
	Partition string
	// ID is an optional producer id. A second message with the same ID in
	// the same partition within the queue's dedup window is not stored again.
	ID string
	// Data is the message, any bytes.
	Data []byte
}

// PushResult is the outcome of one pushed message.
type PushResult struct {
	Partition string `json:"partition"`
	Offset    int64  `json:"offset"`
	Status    string `json:"status"` // StatusStored, StatusDuplicate or StatusSpooled
}

// PutOptions are the options of Client.Put, sent as the headers
// Comb-Partition and Comb-Id.
type PutOptions struct {
	Partition string
	ID        string
}

// PopOptions are the options of Client.Pop; the zero value pops up to 100
// messages of one partition for the default group, without waiting.
type PopOptions struct {
	// Group is the consumer group; empty means DefaultGroup.
	Group string
	// Partition restricts the pop to one partition; empty means any
	// partition with messages ready (the service spreads pops fairly).
	Partition string
	// Max is the most messages returned; 0 means the service's default (100).
	Max int
	// Partitions is the most partitions one pop leases; 0 means 1.
	Partitions int
	// Wait long-polls this long when nothing is ready. It is sent in whole
	// milliseconds, and the request's timeout is extended by it.
	Wait time.Duration
	// Lease overrides the queue's lease time.
	Lease time.Duration
	// AutoAck settles messages on delivery (at most once).
	AutoAck bool
	// From says where a group that has never read a partition starts:
	// FromAll (default), FromNew or FromTime(t).
	From string
}

// Delivery is one delivered message.
type Delivery struct {
	Partition string
	Offset    int64
	ID        string
	// Lease names the lease the message is held under; empty with AutoAck.
	Lease string
	// Attempt counts deliveries of this message to the group, from 1.
	Attempt   int
	CreatedAt time.Time
	Data      []byte
}

// Ack settles a leased message and, cumulatively, every earlier message of
// the same lease.
type Ack struct {
	Partition string `json:"partition"`
	Offset    int64  `json:"offset"`
	Lease     string `json:"lease"`
	// Status is one of AckCompleted (the default when empty), AckRetry,
	// AckFailed or AckDead.
	Status string `json:"status,omitempty"`
}

// AckResult is the outcome of one Ack. An ack under a wrong or expired lease,
// or for an offset outside its lease, settles nothing: OK is false and Error
// says why.
type AckResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Err returns nil for an accepted ack, else an error with the service's
// reason.
func (r AckResult) Err() error {
	if r.OK {
		return nil
	}
	if r.Error == "" {
		return fmt.Errorf("comb: ack refused")
	}
	return fmt.Errorf("comb: ack refused: %s", r.Error)
}

// RenewResult is the outcome of renewing one lease.
type RenewResult struct {
	Lease     string    `json:"lease"`
	OK        bool      `json:"ok"`
	ExpiresAt time.Time `json:"expires_at"`
	Error     string    `json:"error,omitempty"`
}

// Config is a queue's settings. Field names and units follow the wire.
type Config struct {
	LeaseMS             int64 `json:"lease_ms"`              // lease time of a pop (30000)
	MaxAttempts         int64 `json:"max_attempts"`          // deliveries charged by "failed" before dead-lettering (3)
	DeadLetter          bool  `json:"dead_letter"`           // keep dead letters, else drop them (true)
	DedupWindowS        int64 `json:"dedup_window_s"`        // how long a producer id is remembered, 0 = off
	CompletedRetentionS int64 `json:"completed_retention_s"` // delete messages all groups completed after this long, 0 = keep
	MaxAgeS             int64 `json:"max_age_s"`             // delete messages after this long, consumed or not, 0 = keep
	DelayMS             int64 `json:"delay_ms"`              // a message becomes deliverable this long after its push
	MaxMessages         int64 `json:"max_messages"`          // refuse pushes (429) beyond this many retained, 0 = no limit
	MaxBytes            int64 `json:"max_bytes"`             // refuse pushes (429) beyond this many retained bytes, 0 = no limit
	MaxMessageBytes     int64 `json:"max_message_bytes"`     // largest single message (1048576)
}

// ConfigPatch is a partial queue configuration for Client.Configure: nil
// fields keep their current value (a new queue's default). Int64 and Bool
// make the pointers.
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

// Int64 returns a pointer to v, for ConfigPatch.
func Int64(v int64) *int64 { return &v }

// Bool returns a pointer to v, for ConfigPatch.
func Bool(v bool) *bool { return &v }

// Info is a queue's settings and live figures.
type Info struct {
	Name        string          `json:"name"`
	Config      Config          `json:"config"`
	CreatedAt   time.Time       `json:"created_at"`
	Messages    int64           `json:"messages"`     // retained messages
	Bytes       int64           `json:"bytes"`        // retained payload bytes
	DeadLetters int64           `json:"dead_letters"` // dead letters kept
	Partitions  []PartitionInfo `json:"partitions"`
	Groups      []GroupInfo     `json:"groups"`
}

// PartitionInfo is one partition's figures.
type PartitionInfo struct {
	Name       string `json:"name"`
	NextOffset int64  `json:"next_offset"` // offset the next message will get
	LowOffset  int64  `json:"low_offset"`  // oldest retained offset
}

// GroupInfo is one consumer group's state over a queue.
type GroupInfo struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"` // messages the group has not completed
	Leased  int64  `json:"leased"`  // partitions the group holds a lease on
}

// QueueSummary is one line of Client.List.
type QueueSummary struct {
	Name       string `json:"name"`
	Partitions int64  `json:"partitions"`
	Messages   int64  `json:"messages"`
	Bytes      int64  `json:"bytes"`
	Groups     int64  `json:"groups"`
	Pending    int64  `json:"pending"` // the largest backlog of any group
}

// DeadLetterQuery selects a page of dead letters; the zero value is the
// first page of up to 100 of every group.
type DeadLetterQuery struct {
	Group string // empty means every group
	Limit int    // 0 means the service's default (100)
	After string // the cursor returned with the previous page
}

// DeadLetter is a message a group gave up on.
type DeadLetter struct {
	DLQID     string
	Group     string
	Partition string
	Offset    int64
	ID        string
	Attempts  int
	Reason    string // the ack status or cause that dead-lettered it
	DeadAt    time.Time
	Data      []byte
}

// The types below are the wire forms that need care with message bytes;
// the others above are their own wire form.

type wireMessage struct {
	Partition string          `json:"partition,omitempty"`
	ID        string          `json:"id,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	DataB64   *string         `json:"data_b64,omitempty"`
}

type pushRequest struct {
	Messages []wireMessage `json:"messages"`
}

type pushReply struct {
	Results []PushResult `json:"results"`
}

type popRequest struct {
	Group      string `json:"group,omitempty"`
	Partition  string `json:"partition,omitempty"`
	Max        int    `json:"max,omitempty"`
	Partitions int    `json:"partitions,omitempty"`
	WaitMS     int64  `json:"wait_ms,omitempty"`
	LeaseMS    int64  `json:"lease_ms,omitempty"`
	AutoAck    bool   `json:"auto_ack,omitempty"`
	From       string `json:"from,omitempty"`
}

type wireDelivery struct {
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	ID        string          `json:"id"`
	Lease     string          `json:"lease"`
	Attempt   int             `json:"attempt"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
	DataB64   *string         `json:"data_b64"`
}

type popReply struct {
	Messages []wireDelivery `json:"messages"`
}

type ackRequest struct {
	Group string `json:"group,omitempty"`
	Acks  []Ack  `json:"acks"`
}

type ackReply struct {
	Results []AckResult `json:"results"`
}

type renewRequest struct {
	Leases  []string `json:"leases"`
	LeaseMS int64    `json:"lease_ms,omitempty"`
}

type renewReply struct {
	Results []RenewResult `json:"results"`
}

type listReply struct {
	Queues []QueueSummary `json:"queues"`
}

type dlqRequest struct {
	Group  string   `json:"group,omitempty"`
	Limit  int      `json:"limit,omitempty"`
	After  string   `json:"after,omitempty"`
	Replay []string `json:"replay,omitempty"`
	Purge  []string `json:"purge,omitempty"`
}

type wireDeadLetter struct {
	DLQID     string          `json:"dlq_id"`
	Group     string          `json:"group"`
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	ID        string          `json:"id"`
	Attempts  int             `json:"attempts"`
	Reason    string          `json:"reason"`
	DeadAt    time.Time       `json:"dead_at"`
	Data      json.RawMessage `json:"data"`
	DataB64   *string         `json:"data_b64"`
}

type dlqReply struct {
	DeadLetters []wireDeadLetter `json:"dead_letters"`
	Next        string           `json:"next"`
	Done        int              `json:"done"`
}

type errorReply struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// encodeData sets the data field of a wire message. Bytes go as "data" only
// when they are compact, valid UTF-8 JSON: encoding/json re-compacts
// embedded JSON, so anything else would not arrive byte for byte.
func encodeData(b []byte) (json.RawMessage, *string) {
	if len(b) > 0 && utf8.Valid(b) && json.Valid(b) && isCompact(b) {
		return json.RawMessage(b), nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

func isCompact(b []byte) bool {
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return false
	}
	return bytes.Equal(buf.Bytes(), b)
}

// decodeData returns the message bytes of a reply's data or data_b64 field.
func decodeData(raw json.RawMessage, b64 *string) ([]byte, error) {
	if b64 != nil {
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, fmt.Errorf("data_b64: %w", err)
		}
		return b, nil
	}
	// Unmarshal already copied raw out of the reply buffer.
	return []byte(raw), nil
}

func durationMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := d.Milliseconds()
	if ms == 0 {
		// A sub-millisecond value must not turn into "use the default".
		ms = 1
	}
	return ms
}
