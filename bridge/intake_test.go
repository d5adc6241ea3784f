package bridge_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/protocol"
)

// padded is a message whose data says its place in its partition, with
// enough padding that a dozen of them make a push the decoders take.
func padded(p string, n int) string {
	return fmt.Sprintf(`{"partition":%q,"data":{"n":%d,"pad":%q}}`, p, n, strings.Repeat("x", 400))
}

// Pushes pipelined on one connection keep their order per partition
// whether their bodies are decoded on the subscription's goroutine
// (small, nothing ahead) or by the decoders (large, or behind a large
// one): the decoders finish out of order, the hand-off to the push workers
// does not. A malformed large push among them gets its 400 and disturbs
// nothing. Puts, large and small, keep theirs likewise.
func TestPipelinedPushesKeepOrderThroughDecoders(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{DecodeWorkers: 4}})
	nc := env.NC
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	next := map[string]int{}
	const pushes = 240
	for i := range pushes {
		p := fmt.Sprint("p", i%3)
		k := 1 // small: one message
		if i%5 != 0 {
			k = 12 // about 5 KB: past what is decoded inline
		}
		msgs := make([]string, k)
		for j := range msgs {
			msgs[j] = padded(p, next[p])
			next[p]++
		}
		body := `{"messages":[` + strings.Join(msgs, ",") + `]}`
		require.NoError(t, nc.PublishRequest("comb.push.order", inbox, []byte(body)))
		if i == pushes/2 {
			bad := `{"messages":[` + padded("p0", -1) + strings.Repeat(" ", 5000) + `,]}`
			require.NoError(t, nc.PublishRequest("comb.push.order", inbox, []byte(bad)))
		}
	}
	// Puts: the body is the message, the partition a header.
	const puts = 60
	for i := range puts {
		m := nats.NewMsg("comb.put.order")
		m.Reply = inbox
		m.Header.Set(protocol.HeaderPartition, "puts")
		size := 10
		if i%2 == 0 {
			size = 6000
		}
		m.Data = fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i, strings.Repeat("y", size))
		require.NoError(t, nc.PublishMsg(m))
	}
	failed := 0
	for range pushes + 1 + puts {
		m, err := replies.NextMsg(20 * time.Second)
		require.NoError(t, err)
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			require.Equal(t, "400", code, "%s", m.Data)
			require.Contains(t, string(m.Data), `"code":400`)
			failed++
		}
	}
	require.Equal(t, 1, failed, "the malformed push, and only it")

	for p, n := range next {
		ms := pop(t, nc, "order", fmt.Sprintf(`{"partition":%q,"max":10000,"auto_ack":true}`, p))
		require.Len(t, ms, n, "partition %s", p)
		for k, m := range ms {
			var d struct{ N int }
			require.NoError(t, json.Unmarshal(m.Data, &d))
			require.Equal(t, k, d.N, "partition %s offset %d", p, m.Offset)
		}
	}
	ms := pop(t, nc, "order", `{"partition":"puts","max":1000,"auto_ack":true}`)
	require.Len(t, ms, puts)
	for k, m := range ms {
		var d struct{ N int }
		require.NoError(t, json.Unmarshal(m.Data, &d))
		require.Equal(t, k, d.N, "put at offset %d", m.Offset)
	}
}

// A bridge that stops while the decoders hold requests stores and answers
// every one of them: they were taken before Stop, and Stop waits for the
// intake before it refuses new work.
func TestStopAnswersWhatTheDecodersHold(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{Bridge: bridge.Config{DecodeWorkers: 2}})
	nc := env.NC
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	const pushes = 100
	for i := range pushes {
		msgs := make([]string, 12)
		for j := range msgs {
			msgs[j] = padded("p", i*12+j)
		}
		require.NoError(t, nc.PublishRequest("comb.push.stopping", inbox, []byte(`{"messages":[`+strings.Join(msgs, ",")+`]}`)))
	}
	require.NoError(t, nc.Flush())
	env.Bridge.Stop()
	for range pushes {
		m, err := replies.NextMsg(20 * time.Second)
		require.NoError(t, err, "every push taken is answered")
		require.Empty(t, m.Header.Get(micro.ErrorCodeHeader), "taken before Stop, so stored: %s", m.Data)
	}
	const stored = pushes * 12
	info, err := env.Store.Info(t.Context(), domain.InfoParams{Queue: domain.Global("stopping"), Limit: 10})
	require.NoError(t, err)
	require.EqualValues(t, stored, info.Messages)
}
