package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/combtest"
)

// TestPopGateLinesDrain: many consumers of one group pop a message at a
// time, so the group's pops come back thin, its limit falls below the
// workers, and pops wait in line (popgate.go). Every pop is answered, every
// message delivered once, and no pop is left in a line.
func TestPopGateLinesDrain(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{PopWorkers: 8}})
	nc := env.NC
	const partitions, consumers = 200, 32
	var b strings.Builder
	b.WriteString(`{"messages":[`)
	for i := range partitions {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"partition":"p%d","data":%d}`, i, i)
	}
	b.WriteString(`]}`)
	require.Len(t, push(t, nc, "gate", b.String()), partitions)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got sync.Map
	var delivered, pops atomic.Int64
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			for ctx.Err() == nil && delivered.Load() < partitions {
				m, err := nc.RequestWithContext(ctx, "comb.pop.gate", []byte(`{"max":100,"partitions":1}`))
				if ctx.Err() != nil {
					return
				}
				if !assert.NoError(t, err) {
					return
				}
				pops.Add(1)
				var rep struct {
					Messages []msgOut `json:"messages"`
				}
				if !assert.NoError(t, json.Unmarshal(m.Data, &rep)) {
					return
				}
				for _, msg := range rep.Messages {
					if _, dup := got.LoadOrStore(string(msg.Data), true); dup {
						t.Errorf("message %s delivered twice", msg.Data)
					}
					delivered.Add(1)
					_, err := nc.Request("comb.ack.gate", []byte(ackBody("", msg, "completed")), reqTimeout)
					assert.NoError(t, err)
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "pops left unanswered")
	require.EqualValues(t, partitions, delivered.Load())
	st := env.Bridge.Stats()
	require.Positive(t, st.PopsGated, "thin pops of one group waited in line")
	require.Zero(t, st.Gated, "no pop is left in a line")
	t.Logf("%d pops, %d of them waited in line", pops.Load(), st.PopsGated)
}

// holdPops is an Observer that holds chosen tries of a queue's pops in the
// pop gate: the bridge calls PopTx on the pop's worker after its store
// call and before it leaves the gate.
type holdPops struct {
	queue   string
	hold    map[int64]bool // the tries to hold, counted from 1
	tries   atomic.Int64
	held    chan struct{} // a send as each held try begins to wait
	release chan struct{}
}

func (h *holdPops) PopTx(_ time.Duration, q domain.QueueRef, _ int) {
	if q.Name != h.queue || !h.hold[h.tries.Add(1)] {
		return
	}
	h.held <- struct{}{}
	<-h.release
}

func (h *holdPops) PushTx(time.Duration, []domain.PushParams, []domain.PushOutcome) {}
func (h *holdPops) AckTx(time.Duration, []domain.AckParams, []domain.AckOutcome)    {}
func (h *holdPops) Popped(domain.QueueRef, []domain.Message)                        {}
func (h *holdPops) Answered(string, string, bool, time.Duration)                    {}

// TestLinedLongPollTakesHandoff: a long poll waiting in its group's line
// at the pop gate is a waiting pop, and a push answers it as it answers a
// parked one, while the pops ahead of it are still in the gate. (Lined
// pops were never offered anything: at light load a group whose limit had
// fallen kept every consumer in line, each running a statement for a
// message or two, and deliveries took hundreds of milliseconds.)
func TestLinedLongPollTakesHandoff(t *testing.T) {
	t.Parallel()
	h := &holdPops{queue: "lined", hold: map[int64]bool{1: true, 3: true},
		held: make(chan struct{}), release: make(chan struct{})}
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{
		PopWorkers: 3, RetryInterval: time.Hour, Observer: h}})
	var once sync.Once
	release := func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(release) // before the broker stops: its workers may be held
	nc := env.NC
	push(t, nc, "lined", `{"messages":[{"partition":"a","data":1},{"partition":"b","data":2},{"partition":"c","data":3}]}`)

	// The group's limit starts at its 3 workers. A holds one place; B's
	// thin pop (one message of 10) lowers the limit to 2; C holds the
	// other; D, a long poll, waits in line.
	const thin = `{"max":10,"partitions":1}`
	a := longPollBody(t, env, "lined", thin)
	<-h.held
	require.Len(t, pop(t, nc, "lined", thin), 1)
	c := longPollBody(t, env, "lined", thin)
	<-h.held
	d := longPollBody(t, env, "lined", `{"max":10,"partitions":1,"wait_ms":8000}`)
	waitFor(t, func() bool { return env.Bridge.Stats().Gated == 1 })
	before := env.Bridge.Stats()
	require.Zero(t, before.Waiting, "D is in line, not parked")

	res := push(t, nc, "lined", `{"messages":[{"partition":"d","data":4}]}`)
	select {
	case msgs := <-d:
		require.Len(t, msgs, 1)
		require.Equal(t, "d", msgs[0].Partition)
		require.Equal(t, *res[0].Offset, msgs[0].Offset)
		require.Equal(t, "4", string(msgs[0].Data))
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll in line was not answered by the push")
	}
	after := env.Bridge.Stats()
	require.Equal(t, before.PopHandoffs+1, after.PopHandoffs, "by a hand-off")
	require.Equal(t, before.PopStoreCalls, after.PopStoreCalls, "no pop statement")
	require.Zero(t, after.Gated, "it left the line")

	release()
	require.Len(t, recv(t, a, "A"), 1)
	require.Len(t, recv(t, c, "C"), 1)
	require.Empty(t, pop(t, nc, "lined", thin), "each message leased once")
	waitFor(t, func() bool { return env.Bridge.Stats().Gated == 0 && env.Bridge.Waiting() == 0 })
}
