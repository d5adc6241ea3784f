package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/embeddednats"
)

// Two brokers on one PostgreSQL join one NATS cluster: a client of one
// reaches the queues through either, and a push on one wakes a pop parked
// on the other at once, not at the retry interval (an hour here, so only a
// wake-up can answer within the pop's wait).
func TestTwoBrokersInOneCluster(t *testing.T) {
	t.Parallel()
	a := testConfig(t)
	a.Bridge.RetryInterval = time.Hour
	a.NATS.Cluster = embeddednats.ClusterConfig{Name: "comb", Port: -1}
	ba := start(t, a)
	route := fmt.Sprintf("nats-route://%s", ba.Server().NATS().ClusterAddr())

	b := a                  // the same PostgreSQL schema
	b.DataDir = t.TempDir() // a spool of its own: one process per spool directory
	b.NATS.Cluster = embeddednats.ClusterConfig{Name: "comb", Port: -1, Routes: []string{route}}
	bb := start(t, b)
	require.Eventually(t, func() bool { return ba.Server().NATS().NumRoutes() > 0 && bb.Server().NATS().NumRoutes() > 0 },
		10*time.Second, 10*time.Millisecond, "the route is up")

	ncA, err := nats.Connect(ba.ClientURL())
	require.NoError(t, err)
	defer ncA.Close()
	ncB, err := nats.Connect(bb.ClientURL())
	require.NoError(t, err)
	defer ncB.Close()

	// NATS spreads a queue group's requests over the cluster's bridges, so
	// a round's pop and push land on one bridge or on two; the pop must be
	// answered at once either way, and some rounds must cross.
	crossed := 0
	for round := 0; round < 20 && crossed < 3; round++ {
		// A queue per round: a lease of the last round's would hold it.
		q := fmt.Sprint("c", round)
		_, err = ncA.Request("comb.configure."+q, []byte(`{}`), 5*time.Second)
		require.NoError(t, err)
		got := make(chan *nats.Msg, 1)
		go func() {
			m, err := ncB.Request("comb.pop."+q, []byte(`{"wait_ms":20000}`), 30*time.Second)
			if err != nil {
				t.Errorf("round %d: pop: %v", round, err)
			}
			got <- m
		}()
		require.Eventually(t, func() bool { return ba.Bridge().Waiting()+bb.Bridge().Waiting() == 1 },
			10*time.Second, 5*time.Millisecond, "round %d: the pop parks", round)
		poppedOnA := ba.Bridge().Waiting() == 1
		before := ba.Bridge().Stats().PushTransactions
		_, err = ncA.Request("comb.put."+q, []byte(fmt.Sprintf(`"round %d"`, round)), 5*time.Second)
		require.NoError(t, err)
		pushedOnA := ba.Bridge().Stats().PushTransactions > before
		select {
		case m := <-got:
			require.NotNil(t, m)
			require.Contains(t, string(m.Data), fmt.Sprintf(`"round %d"`, round))
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: the parked pop was not woken by the push (pop on A: %v, push on A: %v)", round, poppedOnA, pushedOnA)
		}
		if poppedOnA != pushedOnA {
			crossed++
		}
	}
	require.Positive(t, crossed, "some round's push and pop ran on different brokers")
}
