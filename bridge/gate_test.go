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

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
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
				if !assertNoError(t, err) {
					return
				}
				pops.Add(1)
				var rep struct {
					Messages []msgOut `json:"messages"`
				}
				if !assertNoError(t, json.Unmarshal(m.Data, &rep)) {
					return
				}
				for _, msg := range rep.Messages {
					if _, dup := got.LoadOrStore(string(msg.Data), true); dup {
						t.Errorf("message %s delivered twice", msg.Data)
					}
					delivered.Add(1)
					_, err := nc.Request("comb.ack.gate", []byte(ackBody("", msg, "completed")), reqTimeout)
					assertNoError(t, err)
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

// assertNoError reports err as a test error (from any goroutine) and
// whether there was none.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
