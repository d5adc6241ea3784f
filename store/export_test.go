package store

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

var RetentionCandidatesSQL = retentionCandidatesSQL

// SetMarkWindow sets how many partitions a step of a new group's marking
// reads (markWindowSize), so that tests mark in several steps.
func (s *Store) SetMarkWindow(n int) { s.markWindow = n }

// PartitionsByNameSQL looks partitions up by name.
const PartitionsByNameSQL = partitionsByNameSQL

var Classify = classify

// CollideDedupHashes makes every id of the store's dedup cache share one
// hash, so that every id remembered is a suspect that PostgreSQL settles.
func (s *Store) CollideDedupHashes() { s.dedup.hash = func(string) uint64 { return 42 } }

// KeyedStatements are the statements that keyedPlansSQL plans once per
// connection, by key, by name: Warm's keyed ones.
var KeyedStatements = func() map[string]string {
	m := map[string]string{}
	for _, st := range slices.Concat(warmMain, warmPop) {
		if st.keyed {
			m[st.name] = st.sql
		}
	}
	return m
}()

// PopPool is the pool that serves pops.
func (s *Store) PopPool() *pgxpool.Pool { return s.popPool }

// KeyedPlansSQL opens a transaction whose statements read by key.
const KeyedPlansSQL = keyedPlansSQL

// SetPreloadLimit changes preloadLimit until the test ends.
func SetPreloadLimit(t interface{ Cleanup(func()) }, n int) {
	old := preloadLimit
	preloadLimit = n
	t.Cleanup(func() { preloadLimit = old })
}

// SetReadyWindow changes readyWindow until the test ends.
func SetReadyWindow(t interface{ Cleanup(func()) }, n int) {
	old := readyWindow
	readyWindow = n
	t.Cleanup(func() { readyWindow = old })
}

// SetReadyVacuumAt changes readyVacuumAt until the test ends.
func SetReadyVacuumAt(t interface{ Cleanup(func()) }, n int64) {
	old := readyVacuumAt
	readyVacuumAt = n
	t.Cleanup(func() { readyVacuumAt = old })
}

// ReadySeen is how many partitions the sweeper remembers between its two
// looks (readySeenAgain).
func (s *Store) ReadySeen() int {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	return len(s.readySeen)
}
