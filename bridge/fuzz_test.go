package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/wire/wiretest"
	"github.com/combmq/comb/protocol"
)

// FuzzRequestsAsTenant sends the decoders' seed corpus, and whatever the
// fuzzer makes of it, to every verb of a running broker as an
// authenticated tenant's client: every request is answered, never with a
// 500, and the other tenant's queue of the same name is untouched
// throughout. `go test` runs the corpus; `go test -fuzz
// FuzzRequestsAsTenant ./bridge/` explores further.
func FuzzRequestsAsTenant(f *testing.F) {
	for i, verb := range protocol.Verbs {
		for _, body := range wiretest.Bodies[verb] {
			f.Add(uint8(i), []byte(body))
		}
	}
	env := startTenants(f)
	alice := connectAs(f, env, "alice", "pa")
	bob := comb.New(connectAs(f, env, "bob", "pb"))
	ctx := context.Background()
	// B's orders, which nothing A sends may change.
	var want []comb.Message
	for i := range 5 {
		want = append(want, comb.Message{Partition: fmt.Sprint("p", i%2), Data: fmt.Appendf(nil, `"b-%d"`, i)})
	}
	_, err := bob.Push(ctx, "orders", want)
	require.NoError(f, err)
	before, err := bob.Info(ctx, "orders")
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, verb uint8, body []byte) {
		v := protocol.Verbs[int(verb)%len(protocol.Verbs)]
		subject := protocol.Subject("comb", v, "orders")
		m, err := alice.Request(subject, body, 10*time.Second)
		require.NoError(t, err, "%s %q: no answer", subject, body)
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			require.Contains(t, []string{"400", "404", "409", "413", "429"}, code, "%s %q: %s", subject, body, m.Data)
			var rep protocol.ErrorReply
			require.NoError(t, json.Unmarshal(m.Data, &rep), "%s %q: error body %s", subject, body, m.Data)
			require.NotEmpty(t, rep.Error.Message)
		}
		// Whatever A did to its own orders, B's are as they were.
		after, err := bob.Info(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, before.Messages, after.Messages)
		require.Equal(t, before.Bytes, after.Bytes)
		require.Equal(t, before.Config, after.Config)
		l, err := bob.List(ctx)
		require.NoError(t, err)
		require.Len(t, l, 1, "B lists its own queue only")
	})

}
