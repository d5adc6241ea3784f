package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/combmq/comb/domain"
)

// queueRow is a queue's identity and settings as the store caches them.
type queueRow struct {
	ID        int64
	Tenant    string
	Name      string
	Config    domain.QueueConfig
	CreatedAt time.Time
}

func (q queueRow) ref() domain.QueueRef { return domain.QueueRef{Tenant: q.Tenant, Name: q.Name} }

// configDoc is a queue's settings as stored in comb_queues.config. It is the
// database's format, kept apart from the domain type and the wire's so that
// neither can change what is on disk by accident. The sweeper's statements
// read dedup_window_s, completed_retention_s and max_age_s by these names,
// a missing one as 0, their default (lifecycle.go).
type configDoc struct {
	LeaseMS             int64 `json:"lease_ms"`
	MaxAttempts         int64 `json:"max_attempts"`
	DeadLetter          bool  `json:"dead_letter"`
	RetryDelayMS        int64 `json:"retry_delay_ms"`
	RetryBackoffPct     int64 `json:"retry_backoff_pct"`
	RetryDelayMaxMS     int64 `json:"retry_delay_max_ms"`
	DedupWindowS        int64 `json:"dedup_window_s"`
	CompletedRetentionS int64 `json:"completed_retention_s"`
	MaxAgeS             int64 `json:"max_age_s"`
	DelayMS             int64 `json:"delay_ms"`
	MaxMessages         int64 `json:"max_messages"`
	MaxBytes            int64 `json:"max_bytes"`
	MaxMessageBytes     int64 `json:"max_message_bytes"`
}

func encodeConfig(c domain.QueueConfig) []byte {
	b, err := json.Marshal(configDoc(c))
	if err != nil {
		panic(err) // a struct of integers and a bool
	}
	return b
}

func decodeConfig(raw []byte) (domain.QueueConfig, error) {
	doc := configDoc(domain.DefaultQueueConfig()) // settings added later keep their defaults
	if err := json.Unmarshal(raw, &doc); err != nil {
		return domain.QueueConfig{}, fmt.Errorf("decode config: %w", err)
	}
	return domain.QueueConfig(doc), nil
}

// SweepStats counts what one sweep removed.
type SweepStats struct {
	Segments int64
	Messages int64
	Bytes    int64
	// DedupSets counts the sets of producer ids forgotten (one set per
	// partition per push transaction).
	DedupSets int64
	// Holds counts the delayed messages' holds forgotten once past.
	Holds int64
	// Ready counts the rows taken out of the ready set, their groups'
	// cursors there at its end (ready.go).
	Ready int64
	// ReadySpread counts the rows of pushes (any group) spread into the
	// rows of the groups short of their partitions' ends (ready.go).
	ReadySpread int64
	// ReadyVacuumed says the sweep vacuumed the ready set (enough rows
	// trimmed since the last time, vacuumReadyIfDue).
	ReadyVacuumed bool
	// ReadyIdle says the window of the ready set it read held nothing to
	// spread or trim, now or at the next look (RunSweeper then reads the
	// set less often, readyPace).
	ReadyIdle bool
	// Slots is what slot maintenance did (see slots.go).
	Slots SlotStats
	// More is set when a bound stopped the sweep before it was done.
	More bool
}
