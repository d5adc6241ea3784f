package domain

import (
	"errors"

	"github.com/combmq/comb/protocol"
)

// QueueConfig is a queue's settings. The bounds of each are the protocol's
// (protocol.MaxAttempts and the others); Validate is the one check.
type QueueConfig struct {
	LeaseMS             int64
	MaxAttempts         int64
	DeadLetter          bool
	RetryDelayMS        int64
	RetryBackoffPct     int64
	RetryDelayMaxMS     int64
	DedupWindowS        int64
	CompletedRetentionS int64
	MaxAgeS             int64
	DelayMS             int64
	MaxMessages         int64
	MaxBytes            int64
	MaxMessageBytes     int64
}

// DefaultQueueConfig returns the settings of a queue nobody configured. A
// queue created by a push and one created by configure both start from it.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{
		LeaseMS:         protocol.DefaultLeaseMS,
		MaxAttempts:     protocol.DefaultMaxAttempts,
		DeadLetter:      true,
		MaxMessageBytes: protocol.DefaultMaxMessageBytes,
		RetryBackoffPct: protocol.DefaultRetryBackoffPct,
	}
}

// RetryDelay is how long, in milliseconds, a "failed" ack of the attempt-th delivery
// holds its message back: RetryDelayMS, grown by RetryBackoffPct percent
// for each attempt after the first, capped at RetryDelayMaxMS (when set)
// and at protocol.MaxDelayMS. 0 when the queue has no retry delay.
func (c QueueConfig) RetryDelay(attempt int64) int64 {
	limit := int64(protocol.MaxDelayMS)
	if c.RetryDelayMaxMS > 0 {
		limit = min(limit, c.RetryDelayMaxMS)
	}
	d := min(c.RetryDelayMS, limit)
	// d*pct stays far below 2^63: d <= MaxDelayMS, pct <= MaxRetryBackoffPct.
	for n := int64(1); n < attempt && d < limit && c.RetryBackoffPct > 100; n++ {
		d = min(d*c.RetryBackoffPct/100, limit)
	}
	return d
}

// bound is one integer setting's name, place and range.
type bound struct {
	field  string
	get    func(*QueueConfig) *int64
	lo, hi int64
}

var bounds = []bound{
	{"lease_ms", func(c *QueueConfig) *int64 { return &c.LeaseMS }, protocol.MinLeaseMS, protocol.MaxLeaseMS},
	{"max_attempts", func(c *QueueConfig) *int64 { return &c.MaxAttempts }, 1, protocol.MaxAttempts},
	{"retry_delay_ms", func(c *QueueConfig) *int64 { return &c.RetryDelayMS }, 0, protocol.MaxDelayMS},
	{"retry_backoff_pct", func(c *QueueConfig) *int64 { return &c.RetryBackoffPct }, protocol.MinRetryBackoffPct, protocol.MaxRetryBackoffPct},
	{"retry_delay_max_ms", func(c *QueueConfig) *int64 { return &c.RetryDelayMaxMS }, 0, protocol.MaxDelayMS},
	{"dedup_window_s", func(c *QueueConfig) *int64 { return &c.DedupWindowS }, 0, protocol.MaxDedupWindowS},
	{"completed_retention_s", func(c *QueueConfig) *int64 { return &c.CompletedRetentionS }, 0, protocol.MaxRetentionS},
	{"max_age_s", func(c *QueueConfig) *int64 { return &c.MaxAgeS }, 0, protocol.MaxRetentionS},
	{"delay_ms", func(c *QueueConfig) *int64 { return &c.DelayMS }, 0, protocol.MaxDelayMS},
	{"max_messages", func(c *QueueConfig) *int64 { return &c.MaxMessages }, 0, protocol.MaxCount},
	{"max_bytes", func(c *QueueConfig) *int64 { return &c.MaxBytes }, 0, protocol.MaxCount},
	{"max_message_bytes", func(c *QueueConfig) *int64 { return &c.MaxMessageBytes }, 1, protocol.MaxMessageBytes},
}

// Validate checks every setting's range and reports each one out of range
// as an ErrInvalid naming the field: "lease_ms: 50 is out of range
// 100..86400000".
func (c QueueConfig) Validate() error {
	var errs []error
	for _, b := range bounds {
		if v := *b.get(&c); v < b.lo || v > b.hi {
			errs = append(errs, Invalidf("%s: %d is out of range %d..%d", b.field, v, b.lo, b.hi))
		}
	}
	return errors.Join(errs...)
}

// ConfigPatch is a partial configuration: nil fields are left as they are.
type ConfigPatch struct {
	LeaseMS             *int64
	MaxAttempts         *int64
	DeadLetter          *bool
	RetryDelayMS        *int64
	RetryBackoffPct     *int64
	RetryDelayMaxMS     *int64
	DedupWindowS        *int64
	CompletedRetentionS *int64
	MaxAgeS             *int64
	DelayMS             *int64
	MaxMessages         *int64
	MaxBytes            *int64
	MaxMessageBytes     *int64
}

// Apply merges p into c and validates the result.
func (p ConfigPatch) Apply(c QueueConfig) (QueueConfig, error) {
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&c.LeaseMS, p.LeaseMS)
	set(&c.MaxAttempts, p.MaxAttempts)
	set(&c.RetryDelayMS, p.RetryDelayMS)
	set(&c.RetryBackoffPct, p.RetryBackoffPct)
	set(&c.RetryDelayMaxMS, p.RetryDelayMaxMS)
	set(&c.DedupWindowS, p.DedupWindowS)
	set(&c.CompletedRetentionS, p.CompletedRetentionS)
	set(&c.MaxAgeS, p.MaxAgeS)
	set(&c.DelayMS, p.DelayMS)
	set(&c.MaxMessages, p.MaxMessages)
	set(&c.MaxBytes, p.MaxBytes)
	set(&c.MaxMessageBytes, p.MaxMessageBytes)
	if p.DeadLetter != nil {
		c.DeadLetter = *p.DeadLetter
	}
	return c, c.Validate()
}

// Validate checks the fields p sets, with the ranges of QueueConfig.Validate
// (the defaults are in range, so only what p sets can fail).
func (p ConfigPatch) Validate() error {
	_, err := p.Apply(DefaultQueueConfig())
	return err
}
