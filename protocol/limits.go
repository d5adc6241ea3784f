package protocol

// Defaults of a request that leaves a field out.
const (
	// DefaultPartition is the partition of a message pushed without one.
	DefaultPartition = "default"
	// DefaultGroup is the consumer group of a request that names none.
	DefaultGroup = "default"
	// DefaultPopMax is a pop's max when it names none.
	DefaultPopMax = 100
	// DefaultPopPartitions is how many partitions a pop leases when it
	// names no number.
	DefaultPopPartitions = 1
	// DefaultDLQLimit is a dead-letter listing's page size when it names
	// none.
	DefaultDLQLimit = 100
	// DefaultPeekLimit is a peek's page size when it names none.
	DefaultPeekLimit = 100
	// DefaultInfoLimit is how many partitions, and how many groups, an
	// info page holds when it names no limit.
	DefaultInfoLimit = 1000
	// DefaultListLimit is how many queues a list page holds when it names
	// no limit.
	DefaultListLimit = 1000
)

// Request bounds. Each keeps one request's cost (memory, rows touched, time
// a worker is busy) bounded whatever a client sends. Over a count bound is
// a 413; a value out of range is a 400.
const (
	// MaxPushMessages is the most messages in one push.
	MaxPushMessages = 10000
	// MaxPopMessages bounds a pop's max.
	MaxPopMessages = 10000
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
	// MaxPeekLimit bounds a peek's page size.
	MaxPeekLimit = 1000
	// MaxInfoLimit and MaxListLimit bound the page sizes of info and list.
	// A page also holds no more than fits under the connection's
	// max_payload, whatever its limit.
	MaxInfoLimit = 10000
	MaxListLimit = 10000
	// MaxCursorBytes is the longest after a paged request may carry: every
	// cursor Comb hands out is shorter.
	MaxCursorBytes = 1024
	// MaxAckErrorBytes bounds an ack's error text, kept with a dead letter.
	MaxAckErrorBytes = 1024
)

// Size bounds.
const (
	// MaxMessageBytes is the largest message the protocol allows, and so
	// the ceiling of a queue's max_message_bytes: 8 MiB, NATS's recommended
	// ceiling on a payload. A message travels base64-encoded inside a pop
	// reply when it is not JSON, so the NATS server's max_payload should
	// exceed 4/3 of the largest message a queue accepts.
	MaxMessageBytes = 8 << 20
	// MaxRequestBytes is the largest request body the broker accepts by
	// default, and the embedded NATS server's default max_payload.
	MaxRequestBytes = 8 << 20
)

// Name bounds.
const (
	// MaxQueueBytes is the longest queue name, in bytes.
	MaxQueueBytes = 255
	// MaxQueueTokens is the most dot-separated tokens in a queue name.
	MaxQueueTokens = 16
	// MaxNameBytes is the longest partition or group name, in bytes.
	MaxNameBytes = 255
	// MaxIDBytes is the longest producer id, in bytes: a bound keeps the
	// dedup index small.
	MaxIDBytes = 255
	// MaxLeaseBytes is the longest lease (or dead-letter id) a request may
	// carry: they are opaque and short, and anything longer is not one.
	MaxLeaseBytes = 255
	// MaxHeaderNameBytes is the longest header name, and MaxHeaders the
	// most header names on one message; their values count toward the
	// message's size.
	MaxHeaderNameBytes = 255
	MaxHeaders         = 100
)

// Bounds of queue settings, checked by configure. Each bounds a cost or a
// mistake: attempts beyond 1000 mean "never give up", which dead_letter
// false says better; a dedup window longer than a week makes the id index
// large; retention and age up to ten years; a delay up to a week; counts
// and bytes up to 2^53-1, the largest integer every JSON client
// (JavaScript included) reads exactly. lease_ms takes MinLeaseMS to
// MaxLeaseMS and max_message_bytes 1 to MaxMessageBytes. Retry delays
// (retry_delay_ms, retry_delay_max_ms, an ack's delay_ms) take 0 to
// MaxDelayMS, and retry_backoff_pct MinRetryBackoffPct (no growth) to
// MaxRetryBackoffPct (ten times per attempt).
const (
	MaxAttempts        = 1000
	MaxDedupWindowS    = 7 * 86400
	MaxRetentionS      = 10 * 365 * 86400
	MaxDelayMS         = 7 * 86400 * 1000
	MaxCount           = 1<<53 - 1
	MinRetryBackoffPct = 100
	MaxRetryBackoffPct = 1000
)

// Defaults of a queue nobody configured; see DefaultQueueConfig.
const (
	DefaultLeaseMS         = 30000
	DefaultMaxAttempts     = 3
	DefaultMaxMessageBytes = 1 << 20
	DefaultRetryBackoffPct = 100
)
