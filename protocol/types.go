package protocol

import (
	"encoding/json"
	"time"
)

// The JSON shapes of requests and replies. Optional request fields are
// omitted when zero; a pointer marks a field whose zero value would mean
// something else than leaving it out (a pop's "max":0 is out of range, an
// ack's offset is required).

// PushRequest is the body of <prefix>.push.<queue>.
type PushRequest struct {
	Messages []PushMessage `json:"messages"`
}

// PushMessage is one message of a push. It carries exactly one of Data
// (any JSON value, kept byte for byte) and DataB64 (standard base64).
type PushMessage struct {
	// Partition orders messages; empty means DefaultPartition.
	Partition string `json:"partition,omitempty"`
	// ID is an optional producer id for deduplication.
	ID      string          `json:"id,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	DataB64 *string         `json:"data_b64,omitempty"`
	// Headers travel with the message and come back on pop; a value may
	// be one string or an array of strings. Names starting with "Comb-"
	// are reserved. They count toward the message's size.
	Headers Headers `json:"headers,omitempty"`
	// DelayMS (0..MaxDelayMS) holds the message back this long after it is
	// stored; NotBefore (RFC 3339) until that time. At most one of them.
	// The partition's later messages wait behind it.
	DelayMS   int64  `json:"delay_ms,omitempty"`
	NotBefore string `json:"not_before,omitempty"`
}

// Headers are a message's headers: each name with its values, like NATS
// headers. Replies write every value as an array of strings; a push may
// write a single value as a plain string.
type Headers map[string]HeaderValues

// HeaderValues are the values of one header. It decodes from a string or
// an array of strings, and encodes as an array.
type HeaderValues []string

// UnmarshalJSON accepts "v" as ["v"]; null leaves v as it was.
func (v *HeaderValues) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = HeaderValues{s}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err != nil {
		return err
	}
	*v = ss
	return nil
}

// PushReply is the reply of push and put: one result per message, in
// request order.
type PushReply struct {
	Results []PushResult `json:"results"`
}

// PushResult is the outcome of one pushed message. A spooled message has no
// offset yet; its result leaves offset out.
type PushResult struct {
	Partition string `json:"partition"`
	Offset    int64  `json:"offset"`
	Status    string `json:"status"` // StatusStored, StatusDuplicate or StatusSpooled
}

// PopRequest is the body of <prefix>.pop.<queue>, and of
// <prefix>.npop.<namespace> without Partition; every field is optional.
type PopRequest struct {
	Group      string `json:"group,omitempty"`
	Partition  string `json:"partition,omitempty"`
	Max        *int   `json:"max,omitempty"`        // 1..MaxPopMessages; default DefaultPopMax
	Partitions *int   `json:"partitions,omitempty"` // 1..MaxPopPartitions; default 1
	WaitMS     int64  `json:"wait_ms,omitempty"`    // 0..MaxWaitMS
	LeaseMS    int64  `json:"lease_ms,omitempty"`   // 0 (the queue's) or MinLeaseMS..MaxLeaseMS
	AutoAck    bool   `json:"auto_ack,omitempty"`
	From       string `json:"from,omitempty"` // FromAll, FromNew or an RFC 3339 time
	// Acks, on a queue's pop only, settles earlier leases of Group before
	// the pop looks for messages, as an AckRequest of Group would: one
	// request where a consumer would send an ack and then a pop. At most
	// MaxAcks.
	Acks []Ack `json:"acks,omitempty"`
}

// PopReply is the reply of a pop: the messages leased, in partition order,
// and, when the request carried acks, one result per ack, in order.
type PopReply struct {
	Messages []Delivery  `json:"messages"`
	Acks     []AckResult `json:"acks,omitempty"`
}

// Delivery is one delivered message. It carries Data when the message's
// bytes are JSON, else DataB64.
type Delivery struct {
	// Queue is the message's queue, in the reply of a namespace pop
	// (VerbNamespacePop) only: ack and renew it there.
	Queue     string          `json:"queue,omitempty"`
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	ID        string          `json:"id,omitempty"`
	Lease     string          `json:"lease,omitempty"` // empty with auto_ack
	Attempt   int             `json:"attempt"`
	CreatedAt time.Time       `json:"created_at"`
	Headers   Headers         `json:"headers,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	DataB64   *string         `json:"data_b64,omitempty"`
}

// AckRequest is the body of <prefix>.ack.<queue>.
type AckRequest struct {
	Group string `json:"group,omitempty"`
	Acks  []Ack  `json:"acks"`
}

// Ack settles a leased message and, cumulatively, the earlier messages of
// its lease.
type Ack struct {
	Partition string `json:"partition,omitempty"`
	Offset    *int64 `json:"offset"` // required
	Lease     string `json:"lease"`
	Status    string `json:"status,omitempty"` // AckCompleted (default), AckRetry, AckFailed or AckDead
	// DelayMS, with AckRetry or AckFailed only, holds the message back this
	// long (0..MaxDelayMS) before it is delivered again, in place of the
	// queue's retry delay; 0 redelivers at once.
	DelayMS *int64 `json:"delay_ms,omitempty"`
	// Error, with AckFailed or AckDead only, says why (at most
	// MaxAckErrorBytes of printable UTF-8); a dead letter the ack makes
	// keeps it.
	Error string `json:"error,omitempty"`
}

// AckReply is the reply of an ack: one result per ack, in request order.
type AckReply struct {
	Results []AckResult `json:"results"`
}

// AckResult is the outcome of one ack. An ack under a wrong or expired
// lease, or for an offset outside its lease, settles nothing: OK is false
// and Error says why.
type AckResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// TxnRequest is the body of <prefix>.txn: acks and pushes, on any queues
// of the tenant, applied in one transaction, all or nothing. At least one
// of Acks and Push is required.
type TxnRequest struct {
	Acks []TxnAck  `json:"acks,omitempty"`
	Push []TxnPush `json:"push,omitempty"`
}

// TxnAck is one ack of a transaction: an Ack, with its queue and group.
type TxnAck struct {
	Queue string `json:"queue"`           // required
	Group string `json:"group,omitempty"` // DefaultGroup when empty
	Ack
}

// TxnPush is one push of a transaction: the messages of a push to one
// queue, created like a push creates it.
type TxnPush struct {
	Queue    string        `json:"queue"` // required
	Messages []PushMessage `json:"messages"`
}

// TxnReply is the reply of a committed transaction: one result per ack
// and one PushReply per push, in request order. A transaction that is
// refused (an ack under an expired or wrong lease is a 409) is an error
// reply, and nothing of it was applied.
type TxnReply struct {
	Acks []AckResult `json:"acks"`
	Push []PushReply `json:"push"`
}

// RenewRequest is the body of <prefix>.renew.<queue>.
type RenewRequest struct {
	Leases  []string `json:"leases"`
	LeaseMS int64    `json:"lease_ms,omitempty"` // 0: the queue's lease time
}

// RenewReply is the reply of a renew: one result per lease.
type RenewReply struct {
	Results []RenewResult `json:"results"`
}

// RenewResult is the outcome of renewing one lease.
type RenewResult struct {
	Lease     string    `json:"lease"`
	OK        bool      `json:"ok"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Error     string    `json:"error,omitempty"`
}

// QueueConfig is a queue's settings: the reply of configure, and part of
// info.
type QueueConfig struct {
	LeaseMS             int64 `json:"lease_ms"`              // lease time of a pop (DefaultLeaseMS)
	MaxAttempts         int64 `json:"max_attempts"`          // deliveries charged by "failed" before dead-lettering (DefaultMaxAttempts)
	DeadLetter          bool  `json:"dead_letter"`           // keep dead letters, else drop them (true)
	RetryDelayMS        int64 `json:"retry_delay_ms"`        // hold a "failed" message back this long before its next delivery, 0 = at once
	RetryBackoffPct     int64 `json:"retry_backoff_pct"`     // each later failed attempt's delay is this percent of the one before (DefaultRetryBackoffPct)
	RetryDelayMaxMS     int64 `json:"retry_delay_max_ms"`    // cap of the grown delay, 0 = MaxDelayMS
	DedupWindowS        int64 `json:"dedup_window_s"`        // how long a producer id is remembered, 0 = off
	CompletedRetentionS int64 `json:"completed_retention_s"` // delete messages every group completed after this long, 0 = keep
	MaxAgeS             int64 `json:"max_age_s"`             // delete messages after this long, consumed or not, 0 = keep
	DelayMS             int64 `json:"delay_ms"`              // a message becomes deliverable this long after its push
	MaxMessages         int64 `json:"max_messages"`          // refuse pushes (429) beyond this many retained, 0 = no limit
	MaxBytes            int64 `json:"max_bytes"`             // refuse pushes (429) beyond this many retained bytes, 0 = no limit
	MaxMessageBytes     int64 `json:"max_message_bytes"`     // largest single message (DefaultMaxMessageBytes)
}

// ConfigPatch is the body of <prefix>.configure.<queue>: the settings to
// change. Fields left out (nil) keep their value; a new queue starts from
// the defaults.
type ConfigPatch struct {
	LeaseMS             *int64 `json:"lease_ms,omitempty"`
	MaxAttempts         *int64 `json:"max_attempts,omitempty"`
	DeadLetter          *bool  `json:"dead_letter,omitempty"`
	RetryDelayMS        *int64 `json:"retry_delay_ms,omitempty"`
	RetryBackoffPct     *int64 `json:"retry_backoff_pct,omitempty"`
	RetryDelayMaxMS     *int64 `json:"retry_delay_max_ms,omitempty"`
	DedupWindowS        *int64 `json:"dedup_window_s,omitempty"`
	CompletedRetentionS *int64 `json:"completed_retention_s,omitempty"`
	MaxAgeS             *int64 `json:"max_age_s,omitempty"`
	DelayMS             *int64 `json:"delay_ms,omitempty"`
	MaxMessages         *int64 `json:"max_messages,omitempty"`
	MaxBytes            *int64 `json:"max_bytes,omitempty"`
	MaxMessageBytes     *int64 `json:"max_message_bytes,omitempty"`
}

// InfoRequest is the body of <prefix>.info.<queue>, all optional: a page
// of up to Limit partitions and Limit groups (each list by name), after the
// Next of the previous page. Empty (or {}) is the first page.
type InfoRequest struct {
	Limit *int   `json:"limit,omitempty"` // 1..MaxInfoLimit; default DefaultInfoLimit
	After string `json:"after,omitempty"` // the Next of the previous page
}

// Info is the reply of <prefix>.info.<queue>: a queue's settings and live
// figures, with one page of its partitions and of its groups. The figures
// (Messages, Bytes, DeadLetters and the counts) cover the whole queue on
// every page.
type Info struct {
	Name           string          `json:"name"`
	Config         QueueConfig     `json:"config"`
	CreatedAt      time.Time       `json:"created_at"`
	Messages       int64           `json:"messages"`        // retained messages
	Bytes          int64           `json:"bytes"`           // retained payload bytes
	DeadLetters    int64           `json:"dead_letters"`    // dead letters kept
	PartitionCount int64           `json:"partition_count"` // partitions of the queue, on every page
	GroupCount     int64           `json:"group_count"`     // groups of the queue, on every page
	Partitions     []PartitionInfo `json:"partitions"`
	Groups         []GroupInfo     `json:"groups"`
	Next           string          `json:"next"` // cursor of the next page; empty after the last
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

// ListRequest is the body of <prefix>.list, all optional: a page of up to
// Limit queues by name, after the Next of the previous page. Empty (or {})
// is the first page.
type ListRequest struct {
	Limit *int   `json:"limit,omitempty"` // 1..MaxListLimit; default DefaultListLimit
	After string `json:"after,omitempty"` // the Next of the previous page
}

// ListReply is the reply of <prefix>.list: one page of queues, by name.
type ListReply struct {
	Queues []QueueSummary `json:"queues"`
	Next   string         `json:"next"` // cursor of the next page; empty after the last
}

// QueueSummary is one queue's line in a list.
type QueueSummary struct {
	Name       string `json:"name"`
	Partitions int64  `json:"partitions"`
	Messages   int64  `json:"messages"`
	Bytes      int64  `json:"bytes"`
	Groups     int64  `json:"groups"`
	Pending    int64  `json:"pending"` // the largest backlog of any group
}

// DLQRequest is the body of <prefix>.dlq.<queue>: a listing (Group, Limit,
// After, all optional), or Replay, or Purge, each alone.
type DLQRequest struct {
	Group  string   `json:"group,omitempty"`
	Limit  *int     `json:"limit,omitempty"` // 1..MaxDLQLimit; default DefaultDLQLimit
	After  string   `json:"after,omitempty"` // the Next of the previous page
	Replay []string `json:"replay,omitempty"`
	Purge  []string `json:"purge,omitempty"`
}

// DLQReply is the reply of a dead-letter listing.
type DLQReply struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	Next        string       `json:"next"` // cursor of the next page; empty after the last
}

// DoneReply is the reply of a dead-letter replay or purge.
type DoneReply struct {
	Done int `json:"done"`
}

// DeadLetter is a message a group gave up on.
type DeadLetter struct {
	DLQID     string          `json:"dlq_id"`
	Group     string          `json:"group"`
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	ID        string          `json:"id,omitempty"`
	Attempts  int             `json:"attempts"`
	Reason    string          `json:"reason"`          // the ack status or cause that dead-lettered it
	Error     string          `json:"error,omitempty"` // the error text of the ack that dead-lettered it
	DeadAt    time.Time       `json:"dead_at"`
	Headers   Headers         `json:"headers,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	DataB64   *string         `json:"data_b64,omitempty"`
}

// SeekRequest is the body of <prefix>.seek.<queue>.
type SeekRequest struct {
	Group     string `json:"group,omitempty"`
	Partition string `json:"partition,omitempty"` // empty: every partition
	To        string `json:"to"`                  // SeekStart, SeekEnd or an RFC 3339 time; required
}

// SeekReply is the reply of a seek: how many cursors moved.
type SeekReply struct {
	Moved int `json:"moved"`
}

// GroupsRequest is the body of <prefix>.groups.<queue>: empty (or {}) lists
// the queue's groups (GroupsReply); Delete names a group to delete, with its
// cursors, leases and dead letters, in one transaction (OKReply). A deleted
// group no longer holds back completed_retention_s; a later pop under its
// name starts it anew, placed by the pop's from.
type GroupsRequest struct {
	Delete string `json:"delete,omitempty"`
}

// GroupsReply is the reply of a group listing, ordered by name.
type GroupsReply struct {
	Groups []GroupState `json:"groups"`
}

// GroupState is one consumer group's lag over a queue.
type GroupState struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"` // retained messages the group has not completed
	Leased  int64  `json:"leased"`  // partitions the group holds a live lease on
	Dead    int64  `json:"dead"`    // the group's dead letters kept
	// OldestPendingAgeS is how long ago the oldest message the group has
	// not completed was pushed, in seconds; 0 when Pending is 0.
	OldestPendingAgeS float64 `json:"oldest_pending_age_s"`
}

// OKReply is the reply of delete and of a group delete.
// PeekRequest is the body of <prefix>.peek.<queue>: one partition's
// messages from offset From (Limit of them at most), or, with ID, the one
// message of that producer id. It leases nothing and changes nothing.
// From and Limit are not given with ID.
type PeekRequest struct {
	Partition string `json:"partition,omitempty"` // empty: DefaultPartition
	From      *int64 `json:"from,omitempty"`      // first offset; default 0; below the low offset starts there
	Limit     *int   `json:"limit,omitempty"`     // 1..MaxPeekLimit; default DefaultPeekLimit
	ID        string `json:"id,omitempty"`        // a producer id, found through the dedup window
}

// PeekReply is the reply of a peek: messages in offset order, and the
// offset to ask From next, or nil when the partition has no more now.
type PeekReply struct {
	Messages []PeekedMessage `json:"messages"`
	Next     *int64          `json:"next"`
}

// PeekedMessage is one message of a peek: a Delivery without lease or
// attempt, since nothing is leased.
type PeekedMessage struct {
	Partition string          `json:"partition"`
	Offset    int64           `json:"offset"`
	ID        string          `json:"id,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	Headers   Headers         `json:"headers,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	DataB64   *string         `json:"data_b64,omitempty"`
}

// OKReply is the reply of delete.
type OKReply struct {
	OK bool `json:"ok"`
}

// ErrorReply is the body of every error reply; the headers HeaderError and
// HeaderErrorCode say the same.
type ErrorReply struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the code and message of an error reply.
type ErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	// RetryAfterMS repeats the Comb-Retry-After-Ms header, when set.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// MaintenanceRequest is the body of a maintenance request: on turns the
// bridge's maintenance mode on or off; an empty body (or on absent) only
// asks for the state.
type MaintenanceRequest struct {
	On *bool `json:"on,omitempty"`
}

// MaintenanceReply is a bridge's maintenance state and its spool.
type MaintenanceReply struct {
	Maintenance bool        `json:"maintenance"`
	Spool       *SpoolState `json:"spool,omitempty"` // absent: the bridge has no spool
}

// SpoolState is a bridge's spool: what it holds and how its drain goes.
type SpoolState struct {
	Bytes    int64 `json:"bytes"`
	MaxBytes int64 `json:"max_bytes"`
	Records  int64 `json:"records"`
	Messages int64 `json:"messages"`
	// OldestAgeS is the age of the oldest record not yet drained, in
	// seconds; 0 when the spool is empty.
	OldestAgeS float64 `json:"oldest_age_s"`
	// Drained counts the messages the drain stored since the bridge
	// started; DrainRate is their rate over the last ten seconds, per
	// second.
	Drained   int64   `json:"drained"`
	DrainRate float64 `json:"drain_rate"`
}
