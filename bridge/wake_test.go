package bridge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/store"
)

func TestWakeCodec(t *testing.T) {
	t.Parallel()
	var w wakeSet
	w.add("q", "", "eu")
	w.add("q", "billing", "us")
	w.add("q", "", "eu")
	w.add("r", "g", "p")
	w.addAll("r")
	w.add("r", "g", "p2")
	require.Equal(t, []string{"q", "r"}, w.queues)

	got := decodeWake(encodeWake(w.targets["q"]))
	require.ElementsMatch(t, []wakeTarget{{"", "eu"}, {"billing", "us"}}, got)
	require.Nil(t, decodeWake(encodeWake(w.targets["r"])), "addAll wins")
	require.Nil(t, decodeWake(nil))
	require.Nil(t, decodeWake([]byte("garbage")))

	var many wakeSet
	for i := range maxWakeTargets + 5 {
		many.add("q", "", string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	require.Nil(t, decodeWake(encodeWake(many.targets["q"])), "too many targets: everything")
}

// TestWakeTargets checks which waiters a wake-up retries.
func TestWakeTargets(t *testing.T) {
	t.Parallel()
	b := &Bridge{cfg: Config{MaxPops: 100, RetryInterval: time.Hour}}
	p := newPopper(b)
	waiters := map[string]*popJob{}
	park := func(name, group, partition string) {
		job := &popJob{req: store.PopRequest{Queue: "q", Group: group, Partition: partition}, deadline: time.Now().Add(time.Hour)}
		require.True(t, p.park(job, p.attach("q")))
		waiters[name] = job
	}
	woken := func() []string {
		var out []string
		for {
			select {
			case job := <-p.ch:
				for name, j := range waiters {
					if j == job {
						out = append(out, name)
						delete(waiters, name)
					}
				}
			default:
				return out
			}
		}
	}
	park("g1", "g", "")
	park("g2", "g", "")
	park("g3", "g", "")
	park("h1", "h", "")
	park("g-eu", "g", "eu")
	park("h-us", "h", "us")
	require.Equal(t, 6, p.waiting())

	// A push to one partition: one waiter per group, plus those that
	// asked for that partition.
	p.wake("q", []wakeTarget{{"", "us"}})
	got := woken()
	require.Len(t, got, 3)
	require.Contains(t, got, "h1")
	require.Contains(t, got, "h-us")
	require.Equal(t, 3, p.waiting())

	// An ack of group g on partition eu: one more of g, and g-eu.
	p.wake("q", []wakeTarget{{"g", "eu"}})
	got = woken()
	require.Len(t, got, 2)
	require.Contains(t, got, "g-eu")

	// Another queue's wake-up touches nothing; a bare one wakes everyone.
	p.wake("other", nil)
	require.Empty(t, woken())
	p.wake("q", nil)
	require.Len(t, woken(), 1)
	require.Zero(t, p.waiting())
	p.mu.Lock()
	defer p.mu.Unlock()
	// Woken jobs let go of the queue until their next try attaches again:
	// a wake-up before that try needs no record, the try will see its data.
	require.NotContains(t, p.queues, "q")
}
