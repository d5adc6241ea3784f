package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/combmq/comb/domain"
)

// TestConcurrentInvariants pins invariants 1–3 of architecture.md under
// concurrency: many producers on few partitions, two groups with several
// consumers each, some of which abandon their leases (as a crashed consumer
// would). Every message must reach each group; each consumer must see a
// partition's offsets contiguous and in order within a lease; an abandoned
// lease's ack must settle nothing. A skipped offset would show as a message
// no group member ever completes. Producers offer half their pushes to a
// group's waiting pop (Store.PushOffer) and consume what they are handed,
// so hand-offs interleave with pops, acks and expiries.
func TestConcurrentInvariants(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	const (
		producers   = 6
		perProducer = 300
		partitions  = 3
		total       = producers * perProducer
	)
	groups := []string{"g1", "g2"}

	// received[group][message] counts deliveries that were acked.
	type groupState struct {
		mu       sync.Mutex
		acked    map[string]bool
		expired  int
		badStale int
	}
	state := map[string]*groupState{}
	for _, g := range groups {
		state[g] = &groupState{acked: map[string]bool{}}
	}
	var pushed atomic.Int64

	var handoffs atomic.Int64
	// consume checks and acks what consumer c of group g was delivered;
	// c is -1 for a producer's hand-off.
	consume := func(ectx context.Context, g string, c int, ms []domain.Message) error {
		gs := state[g]
		// Group the batch by lease, checking contiguity.
		last := map[string]domain.Message{}
		for _, m := range ms {
			if prev, ok := last[m.Lease]; ok && m.Offset != prev.Offset+1 {
				return fmt.Errorf("%s: lease %s jumps from %d to %d", g, m.Lease, prev.Offset, m.Offset)
			}
			last[m.Lease] = m
		}
		// Consumer 0 abandons one batch in five: its lease
		// must expire and its messages come back.
		abandon := c == 0 && rand.IntN(5) == 0
		if abandon {
			time.Sleep(250 * time.Millisecond) // let the 200 ms lease expire: the point of this branch
		}
		var acks []domain.Ack
		for _, m := range last {
			acks = append(acks, domain.Ack{Partition: m.Partition, Offset: m.Offset, Lease: m.Lease})
		}
		outs, err := st.Ack(ectx, []domain.AckParams{{Queue: domain.Global("inv"), Group: g, Acks: acks}})
		if err != nil {
			return err
		}
		if outs[0].Err != nil {
			return outs[0].Err
		}
		if abandon {
			gs.mu.Lock()
			gs.expired++
			for _, res := range outs[0].Results {
				// Another consumer may have taken the partition
				// over; then this stale ack must fail. If nobody
				// did, the lease is merely late: also refused.
				if res.OK {
					gs.badStale++
				}
			}
			gs.mu.Unlock()
			return nil
		}
		gs.mu.Lock()
		for i, res := range outs[0].Results {
			if !res.OK {
				continue // our lease expired meanwhile: redelivered later
			}
			a := acks[i]
			for _, m := range ms {
				if m.Lease == a.Lease {
					gs.acked[string(m.Data)] = true
				}
			}
		}
		gs.mu.Unlock()
		return nil
	}

	eg, ectx := errgroup.WithContext(ctx)
	for p := range producers {
		eg.Go(func() error {
			for i := 0; i < perProducer; {
				n := 1 + rand.IntN(10)
				r := domain.PushParams{Queue: domain.Global("inv")}
				for j := 0; j < n && i < perProducer; j++ {
					r.Messages = append(r.Messages, domain.PushMessage{
						Partition: "p" + strconv.Itoa(rand.IntN(partitions)),
						Data:      []byte(fmt.Sprintf("%d-%d", p, i)),
					})
					i++
				}
				// Half the pushes offer their first partition's messages
				// to a waiting pop of a group, which this producer then
				// consumes as that pop's consumer would (Store.PushOffer).
				var offers []domain.Offer
				g := groups[rand.IntN(len(groups))]
				if rand.IntN(2) == 0 {
					offers = []domain.Offer{{Pop: domain.PopParams{Queue: domain.Global("inv"), Group: g, Max: 1 + rand.IntN(5), LeaseMS: 200},
						Partition: r.Messages[0].Partition}}
				}
				outs, handed, err := st.PushOffer(ectx, []domain.PushParams{r}, offers)
				if err != nil {
					return err
				}
				if len(handed) != len(offers) {
					return fmt.Errorf("%d offers, %d hand-offs", len(offers), len(handed))
				}
				if len(handed) > 0 && len(handed[0].Messages) > 0 {
					handoffs.Add(1)
					if err := consume(ectx, g, -1, handed[0].Messages); err != nil {
						return err
					}
				}
				if outs[0].Err != nil {
					return outs[0].Err
				}
				if len(outs[0].Results) != len(r.Messages) {
					return fmt.Errorf("push of %d messages returned %d results", len(r.Messages), len(outs[0].Results))
				}
				pushed.Add(int64(len(r.Messages)))
				// Pacing: consumers catch up between pushes, so that
				// offers find caught-up cursors.
				time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
			}
			return nil
		})
	}
	for _, g := range groups {
		gs := state[g]
		for c := range 3 {
			eg.Go(func() error {
				for {
					gs.mu.Lock()
					done := len(gs.acked) == total
					gs.mu.Unlock()
					if done {
						return nil
					}
					if err := ectx.Err(); err != nil {
						return err
					}
					ms, err := st.Pop(ectx, domain.PopParams{Queue: domain.Global("inv"), Group: g, Max: 1 + rand.IntN(20),
						Partitions: 1 + rand.IntN(2), LeaseMS: 200})
					if errorsIsNotFound(err) {
						continue // no producer has created the queue yet
					}
					if err != nil {
						return err
					}
					if len(ms) == 0 {
						time.Sleep(5 * time.Millisecond) // poll pacing
						continue
					}
					if err := consume(ectx, g, c, ms); err != nil {
						return err
					}
				}
			})
		}
	}
	require.NoError(t, eg.Wait())
	require.Equal(t, int64(total), pushed.Load())
	for _, g := range groups {
		gs := state[g]
		require.Len(t, gs.acked, total, "group %s completed every message", g)
		require.Zero(t, gs.badStale, "group %s: an expired lease's ack settled something", g)
		for k := range gs.acked {
			require.True(t, strings.Contains(k, "-"))
		}
	}
	// Offsets are dense per partition: next_offset equals what was stored.
	var sum int64
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT sum(next_offset) FROM comb_partitions`).Scan(&sum))
	require.Equal(t, int64(total), sum)
	t.Logf("abandoned leases: g1 %d, g2 %d; pushes that handed off: %d", state["g1"].expired, state["g2"].expired, handoffs.Load())
}

func errorsIsNotFound(err error) bool {
	return errors.Is(err, domain.ErrNotFound)
}
