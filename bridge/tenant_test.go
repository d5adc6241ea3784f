package bridge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
)

// natsOptions parses conf, in nats-server's own syntax, as `comb serve
// -config` would.
func natsOptions(t testing.TB, conf string) *server.Options {
	t.Helper()
	path := filepath.Join(t.TempDir(), "comb.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	opts := &server.Options{}
	require.NoError(t, opts.ProcessConfigFile(path))
	return opts
}

const twoTenants = `
accounts {
  A: { users: [ { user: alice, password: pa } ] }
  B: { users: [ { user: bob, password: pb } ] }
}
`

func startTenants(t testing.TB) *combtest.Env {
	return combtest.StartWith(t, combtest.Options{
		NATS:          embeddednats.Config{Options: natsOptions(t, twoTenants)},
		ClientOptions: []nats.Option{nats.UserInfo("alice", "pa")},
	})
}

// connectAs connects over TCP as user.
func connectAs(t testing.TB, env *combtest.Env, user, pass string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(env.URL, nats.UserInfo(user, pass), nats.MaxReconnects(0))
	require.NoError(t, err, "connect as %s", user)
	t.Cleanup(nc.Close)
	return nc
}

// Two tenants push and consume queues of the same names at the same time;
// every message reaches its own tenant's consumers exactly, none the
// other's, and each tenant lists and counts only its own.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	env := startTenants(t)
	require.ElementsMatch(t, []string{"A", "B"}, env.Server.Tenants())

	const perTenant, partitions = 400, 4
	tenants := map[string]*comb.Client{
		"A": comb.New(connectAs(t, env, "alice", "pa")),
		"B": comb.New(connectAs(t, env, "bob", "pb")),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, c := range tenants {
		for _, queue := range []string{"orders", "audit"} {
			_, err := c.Configure(ctx, queue, comb.ConfigPatch{})
			require.NoError(t, err)
		}
	}
	var mu sync.Mutex
	got := map[string]map[string]int{} // consumer tenant -> message -> times
	var wg sync.WaitGroup
	for name, c := range tenants {
		got[name] = map[string]int{}
		for _, queue := range []string{"orders", "audit"} {
			wg.Add(2)
			go func() { // producer
				defer wg.Done()
				for i := 0; i < perTenant; i += 20 {
					var batch []comb.Message
					for j := i; j < i+20; j++ {
						batch = append(batch, comb.Message{
							Partition: fmt.Sprint("p", j%partitions),
							Data:      []byte(fmt.Sprintf(`"%s/%s/%d"`, name, queue, j)),
						})
					}
					_, err := c.Push(ctx, queue, batch)
					if err != nil {
						t.Errorf("%s push %s: %v", name, queue, err)
						return
					}
				}
			}()
			go func() { // consumer
				defer wg.Done()
				seen := 0
				for seen < perTenant && ctx.Err() == nil {
					ds, err := c.Pop(ctx, queue, comb.PopOptions{Max: 50, Wait: time.Second})
					if err != nil {
						t.Errorf("%s pop %s: %v", name, queue, err)
						return
					}
					var acks []comb.Ack
					mu.Lock()
					for _, d := range ds {
						got[name][string(d.Data)]++
						acks = append(acks, comb.Ack{Partition: d.Partition, Offset: d.Offset, Lease: d.Lease})
					}
					mu.Unlock()
					seen += len(ds)
					if len(acks) > 0 {
						if _, err := c.Ack(ctx, queue, "", acks); err != nil {
							t.Errorf("%s ack %s: %v", name, queue, err)
							return
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	require.NoError(t, ctx.Err())

	for name := range tenants {
		for msg, n := range got[name] {
			require.True(t, strings.HasPrefix(msg, `"`+name+"/"), "tenant %s got %s: another tenant's message", name, msg)
			require.Equal(t, 1, n, "tenant %s got %s %d times", name, msg, n)
		}
		require.Equal(t, 2*perTenant, len(got[name]), "tenant %s: every message of its own, once each", name)
	}

	for name, c := range tenants {
		list, err := c.List(ctx)
		require.NoError(t, err)
		var names []string
		for _, q := range list {
			names = append(names, q.Name)
		}
		require.ElementsMatch(t, []string{"orders", "audit"}, names, "tenant %s lists its own queues", name)
		info, err := c.Info(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(perTenant), info.Messages, "tenant %s counts its own messages", name)
	}
	// The store holds the two tenants' queues apart, and none for the
	// global tenant, which no user of this configuration reaches.
	for _, tenant := range []string{"A", "B"} {
		_, err := env.Store.Info(ctx, domain.InfoParams{Queue: domain.QueueRef{Tenant: tenant, Name: "orders"}, Limit: 1000})
		require.NoError(t, err)
	}
	l, err := env.Store.List(ctx, domain.ListParams{Tenant: "", Limit: 1000})
	require.NoError(t, err)
	require.Empty(t, l.Queues)

	// Deleting A's queue leaves B's.
	require.NoError(t, tenants["A"].Delete(ctx, "orders"))
	_, err = tenants["A"].Info(ctx, "orders")
	require.Error(t, err)
	info, err := tenants["B"].Info(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, int64(perTenant), info.Messages)
}

// A push in one tenant wakes the long-polling pops of that tenant's queue,
// not those of another tenant's queue of the same name.
func TestTenantWakeUps(t *testing.T) {
	t.Parallel()
	env := startTenants(t)
	a := comb.New(connectAs(t, env, "alice", "pa"))
	b := comb.New(connectAs(t, env, "bob", "pb"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []*comb.Client{a, b} {
		_, err := c.Configure(ctx, "orders", comb.ConfigPatch{})
		require.NoError(t, err)
	}

	type popped struct {
		ds  []comb.Delivery
		err error
		at  time.Time
	}
	bDone := make(chan popped, 1)
	go func() {
		ds, err := b.Pop(ctx, "orders", comb.PopOptions{Wait: 3 * time.Second})
		bDone <- popped{ds, err, time.Now()}
	}()
	aDone := make(chan popped, 1)
	go func() {
		ds, err := a.Pop(ctx, "orders", comb.PopOptions{Wait: 10 * time.Second})
		aDone <- popped{ds, err, time.Now()}
	}()
	require.Eventually(t, func() bool { return env.Bridge.Waiting() == 2 }, 10*time.Second, 10*time.Millisecond)

	pushed := time.Now()
	_, err := a.Put(ctx, "orders", []byte(`"for A"`), comb.PutOptions{})
	require.NoError(t, err)
	ra := <-aDone
	require.NoError(t, ra.err)
	require.Len(t, ra.ds, 1)
	require.Equal(t, `"for A"`, string(ra.ds[0].Data))
	require.Less(t, ra.at.Sub(pushed), 2*time.Second, "woken by the push, not by its retry interval")

	rb := <-bDone
	require.NoError(t, rb.err)
	require.Empty(t, rb.ds, "B's pop of its own orders finds nothing")
}
