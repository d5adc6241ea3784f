package store

import (
	"context"
	"time"
)

// Slot maintenance with the clock given: tests choose the current slot.
func (s *Store) MaintainSlotsAt(ctx context.Context, cur int, phase float64, now time.Time) (SlotStats, error) {
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	return s.maintainSlotsLocked(ctx, cur, phase, now)
}

const (
	RingSlots  = ringSlots
	ColdSlot   = coldSlot
	SlotSettle = slotSettle
	HotHorizon = hotHorizon
)

var (
	SlotTable  = slotTable
	HotSlotSQL = hotSlotSQL
)

var Classify = classify

// CollideDedupHashes makes every id of the store's dedup cache share one
// hash, so that every id remembered is a suspect that PostgreSQL settles.
func (s *Store) CollideDedupHashes() { s.dedup.hash = func(string) uint64 { return 42 } }
