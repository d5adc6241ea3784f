package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// BenchmarkWake measures how soon a long-polling pop is answered after a
// push: the time from sending the push to receiving the pop's reply. NATS
// gives a round's pop and push to either broker's bridge, so each round is
// counted by where they ran: on one bridge (same), or the pop parked on one
// and the push taken by the other (cross), the wake-up then crossing the
// route. The figures are the mean and median per kind in ms, and the
// rounds of each kind. The safety tick (retry_interval) is an hour, so
// only a wake-up can answer.
//
//	go test -run '^$' -bench Wake -benchtime 200x ./broker/
func BenchmarkWake(b *testing.B) {
	a := testConfig(b)
	a.Bridge.RetryInterval = time.Hour
	a.NATS.Cluster = embeddednats.ClusterConfig{Name: "comb", Port: -1}
	ba := start(b, a)
	route := fmt.Sprintf("nats-route://%s", ba.Server().NATS().ClusterAddr())
	c := a
	c.NATS.Cluster = embeddednats.ClusterConfig{Name: "comb", Port: -1, Routes: []string{route}}
	bb := start(b, c)
	require.Eventually(b, func() bool { return ba.Server().NATS().NumRoutes() > 0 && bb.Server().NATS().NumRoutes() > 0 },
		10*time.Second, 10*time.Millisecond, "the route is up")
	ncA, err := nats.Connect(ba.ClientURL())
	require.NoError(b, err)
	defer ncA.Close()
	ncB, err := nats.Connect(bb.ClientURL())
	require.NoError(b, err)
	defer ncB.Close()

	lat := map[string][]time.Duration{}
	round := 0
	for b.Loop() {
		b.StopTimer()
		// A queue per round: the last round's lease holds its partition.
		round++
		q := fmt.Sprint("wake-", round)
		_, err := ncA.Request("comb.configure."+q, []byte(`{}`), 5*time.Second)
		require.NoError(b, err)
		got := make(chan error, 1)
		var at time.Time
		go func() {
			m, err := ncB.Request("comb.pop."+q, []byte(`{"wait_ms":20000,"auto_ack":true}`), 30*time.Second)
			at = time.Now()
			if err == nil && !strings.Contains(string(m.Data), `"woken"`) {
				err = fmt.Errorf("pop answered without the message: %s", m.Data)
			}
			got <- err
		}()
		require.Eventually(b, func() bool { return ba.Bridge().Waiting()+bb.Bridge().Waiting() == 1 },
			10*time.Second, time.Millisecond, "the pop parks")
		poppedOnA := ba.Bridge().Waiting() == 1
		before := ba.Bridge().Stats().PushTransactions
		b.StartTimer()
		t0 := time.Now()
		_, err = ncA.Request("comb.put."+q, []byte(`"woken"`), 5*time.Second)
		require.NoError(b, err)
		require.NoError(b, <-got)
		b.StopTimer()
		kind := "same"
		if pushedOnA := ba.Bridge().Stats().PushTransactions > before; pushedOnA != poppedOnA {
			kind = "cross"
		}
		lat[kind] = append(lat[kind], at.Sub(t0))
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for kind, ds := range lat {
		slices.Sort(ds)
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		b.ReportMetric(ms(sum)/float64(len(ds)), "ms/wake-"+kind)
		b.ReportMetric(ms(ds[len(ds)/2]), "p50-ms-"+kind)
		b.ReportMetric(float64(len(ds)), "rounds-"+kind)
	}
}

// The cluster example of docs/operations.md loads through comb serve's
// loader, and the flags of the other two brokers parse into the same
// cluster settings.
func TestClusterDocExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)## Several bridges in one cluster\n.*?```conf\n(.*?)```").FindSubmatch(b)
	require.NotNil(t, m, "the example block")
	path := filepath.Join(t.TempDir(), "comb-1.conf")
	require.NoError(t, os.WriteFile(path, m[1], 0o600))
	c := DefaultConfig()
	_, err = c.LoadFile(path)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	o := c.NATS.Options
	require.Equal(t, "comb-1", o.ServerName)
	require.Equal(t, "comb", o.Cluster.Name)
	require.Equal(t, 6222, o.Cluster.Port)
	require.Len(t, o.Routes, 2)

	// comb-2's flags, from the shell example, through the settings table.
	sh := regexp.MustCompile(`(?s)comb serve -server-name comb-2 (.*?)-nats-listen`).FindSubmatch(b)
	require.NotNil(t, sh, "comb-2's command")
	args := strings.Fields(strings.ReplaceAll(string(sh[1]), "\\\n", " "))
	set := map[string]string{}
	for i := 0; i+1 < len(args); i += 2 {
		set[strings.TrimPrefix(args[i], "-")] = args[i+1]
	}
	c2 := DefaultConfig()
	for _, s := range Settings() {
		if v, ok := set[s.Flag()]; ok {
			require.NoError(t, s.Value(&c2).Set(v), s.Flag())
			delete(set, s.Flag())
		}
	}
	require.Empty(t, set, "every flag of the example is a setting")
	require.NoError(t, c2.Validate())
	require.Equal(t, "comb", c2.NATS.Cluster.Name)
	require.Equal(t, 6223, c2.NATS.Cluster.Port)
	require.Equal(t, []string{"nats-route://127.0.0.1:6222", "nats-route://127.0.0.1:6224"}, c2.NATS.Cluster.Routes)
}
