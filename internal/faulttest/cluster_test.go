//go:build linux

package faulttest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/freeport"
	"github.com/combmq/comb/internal/pgtest"
)

// TestClusterKillAndRollingRestart runs three `comb serve` processes in one
// NATS cluster on one PostgreSQL, with producers and consumers connected
// through a server list of all three. Under load it SIGKILLs one bridge and
// starts it again, then restarts all three in turn with SIGTERM, each
// draining and going into a short lame duck mode. Afterwards it verifies
// every message: each acknowledged push is stored once, at the offset its
// answers agree on (producer ids and a dedup window make retries safe);
// each is delivered and completed; a message delivered twice was delivered
// again after a lease ran out (a higher attempt), never twice as the same
// delivery; and per producer and partition both the offsets and the first
// deliveries follow the order the producer pushed in.
//
// Like the other tests of this package it does not run in parallel.
func TestClusterKillAndRollingRestart(t *testing.T) {
	const (
		producers  = 4
		batch      = 5
		partitions = 4
		consumers  = 2
		leaseMS    = 3000 // what a dead bridge's leases hold back
		queue      = "cluster"
		group      = "g"
		// Lame duck mode short, as the brief's operator would set it for
		// a rolling restart: the drain and the spread disconnects take
		// about 2.5 s a bridge.
		lameDuck  = "2s"
		ldmGrace  = "500ms"
		clientRTO = 2 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()

	started := time.Now()
	// At debug level each broker logs the leases its pops take ("pop
	// leased"), which a delivery twice as one attempt is shown against.
	bs := newClusterProcs(t, pgtest.URL(t), 3, "-lame-duck-duration", lameDuck, "-lame-duck-grace-period", ldmGrace,
		"-log-level", "debug")
	for _, b := range bs {
		b.start()
	}
	waitRoutes(t, bs)

	servers := make([]string, len(bs))
	for i, b := range bs {
		servers[i] = b.url
	}
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(strings.Join(servers, ","),
			nats.Name(name),
			nats.MaxReconnects(-1), // every bridge comes back: never give up
			nats.ReconnectWait(50*time.Millisecond),
			nats.ReconnectJitter(0, 0))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	admin := comb.New(connect("admin"), comb.WithTimeout(clientRTO))
	_, err := admin.Configure(ctx, queue, comb.ConfigPatch{LeaseMS: comb.Int64(leaseMS), DedupWindowS: comb.Int64(600)})
	require.NoError(t, err)

	// A delivery keeps what tells two deliveries of an id apart when
	// they should not both exist: the lease each came under (one lease
	// twice is the client's or the wire's doing, two leases the store's),
	// the consumer, and when, against the kill and the restarts.
	type delivery struct {
		offset   int64
		attempt  int
		lease    string
		consumer int
		at       time.Duration
	}
	var (
		mu        sync.Mutex
		answers   = map[string][]pushAnswer{} // id -> every answer its pushes got
		delivered = map[string][]delivery{}   // id -> every delivery of it
		// firstSeen is, per partition, the ids in the order of their first
		// delivery.
		firstSeen = map[string][]string{}
		pushedAt  = make([][]time.Time, producers) // when each successful push was answered, per producer
		answered  atomic.Int64
		retries   atomic.Int64
		sent      = make([]int, producers) // batches answered, per producer
	)
	idOf := func(p, i, j int) string { return fmt.Sprintf("%d-%d-%d", p, i, j) }

	// Producers push until stopped, one batch in flight each, a batch
	// retried with the same ids until it is answered.
	pctx, pstop := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	for p := range producers {
		c := comb.New(connect(fmt.Sprint("producer-", p)), comb.WithTimeout(clientRTO))
		pwg.Go(func() {
			for i := 0; pctx.Err() == nil; i++ {
				msgs := make([]comb.Message, batch)
				for j := range msgs {
					id := idOf(p, i, j)
					msgs[j] = comb.Message{Partition: "p" + strconv.Itoa((p+i+j)%partitions), ID: id, Data: []byte(strconv.Quote(id))}
				}
				// Once begun, a batch is pushed until answered, so that
				// every id sent is acknowledged; only the test's own
				// deadline ends it.
				res, err := pushRetrying(ctx, c, queue, msgs, &retries)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("push %d-%d: %v", p, i, err)
					}
					return
				}
				now := time.Now()
				mu.Lock()
				for j, r := range res {
					answers[msgs[j].ID] = append(answers[msgs[j].ID], pushAnswer{r.Partition, r.Offset, r.Status})
				}
				pushedAt[p] = append(pushedAt[p], now)
				sent[p] = i + 1
				mu.Unlock()
				answered.Add(int64(len(res)))
			}
		})
	}
	producersDone := make(chan struct{})
	go func() { pwg.Wait(); close(producersDone) }()
	defer func() { pstop(); cancel(); <-producersDone }()

	var ackErrors atomic.Int64
	cctx, cstop := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	consumeErrs := make([]error, consumers)
	for k := range consumers {
		c := comb.New(connect(fmt.Sprint("consumer-", k)), comb.WithTimeout(clientRTO))
		cwg.Go(func() {
			consumeErrs[k] = c.Consume(cctx, queue, comb.ConsumeOptions{Group: group, Max: 20, Partitions: 2,
				Wait: 200 * time.Millisecond, Concurrency: 2,
				OnAckError: func(error) { ackErrors.Add(1) }},
				func(_ context.Context, ds []comb.Delivery) error {
					mu.Lock()
					defer mu.Unlock()
					for _, d := range ds {
						if string(d.Data) != strconv.Quote(d.ID) {
							t.Errorf("delivery %s/%d: id %q with data %s", d.Partition, d.Offset, d.ID, d.Data)
						}
						if len(delivered[d.ID]) == 0 {
							firstSeen[d.Partition] = append(firstSeen[d.Partition], d.ID)
						}
						delivered[d.ID] = append(delivered[d.ID], delivery{d.Offset, d.Attempt, d.Lease, k, time.Since(started)})
					}
					return nil
				})
		})
	}
	consumed := make(chan struct{})
	go func() { cwg.Wait(); close(consumed) }()
	defer func() { cstop(); <-consumed }()

	// more waits until another n messages have been answered.
	t.Logf("three brokers up and routed in %.1f s", time.Since(started).Seconds())
	began := time.Now()
	more := func(n int64, what string) {
		t.Helper()
		goal := answered.Load() + n
		waitFor(t, 20*time.Second, what, func() bool { return answered.Load() >= goal })
		t.Logf("%5.1f s: %s", time.Since(began).Seconds(), what)
	}
	// gapsSince are the longest times without a successful push from
	// since to now: of all producers together (the service), and of the
	// producer that waited longest (a client).
	gapsSince := func(since time.Time) (service, client time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		gap := func(ats []time.Time) time.Duration {
			last, g := since, time.Duration(0)
			for _, at := range ats {
				if at.Before(since) {
					continue
				}
				g = max(g, at.Sub(last))
				last = at
			}
			return max(g, time.Since(last))
		}
		var all []time.Time
		for _, ats := range pushedAt {
			all = append(all, ats...)
			client = max(client, gap(ats))
		}
		slices.SortFunc(all, time.Time.Compare)
		return gap(all), client
	}

	more(300, "load before the kill")
	killAt := time.Now()
	bs[1].kill()
	retriesAtKill := retries.Load()
	// Down for a second at least, under load: its clients reconnect to
	// the others, and its leases wait out their time.
	more(200, "pushes go on with a bridge dead")
	waitFor(t, 5*time.Second, "a second with a bridge dead", func() bool { return time.Since(killAt) > time.Second })
	bs[1].start()
	waitRoutes(t, bs)
	more(200, "load after the killed bridge came back")
	killGap, killClientGap := gapsSince(killAt)

	rollAt := time.Now()
	retriesAtRoll := retries.Load()
	var stopFor []time.Duration
	for _, b := range bs {
		t0 := time.Now()
		b.terminate()
		stopFor = append(stopFor, time.Since(t0))
		more(100, "pushes go on while a bridge restarts")
		b.start()
		t.Logf("%5.1f s: restarted", time.Since(began).Seconds())
		waitRoutes(t, bs)
		more(100, "load after a restarted bridge")
	}
	rollGap, rollClientGap := gapsSince(rollAt)

	pstop()
	select {
	case <-producersDone:
	case <-time.After(20 * time.Second):
		t.Fatal("producers did not finish")
	}
	require.False(t, t.Failed(), "a producer failed")
	t.Logf("%5.1f s: producers stopped", time.Since(began).Seconds())

	mu.Lock()
	total := len(answers)
	mu.Unlock()
	waitCompleted(ctx, t, 30*time.Second, admin, queue, group, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) >= total
	})
	t.Logf("%5.1f s: every message completed", time.Since(began).Seconds())
	cstop()
	<-consumed
	for k, err := range consumeErrs {
		require.NoError(t, err, "consumer %d", k)
	}

	mu.Lock()
	defer mu.Unlock()
	// Every id sent was answered: a producer's batches 0..sent-1, whole.
	want := 0
	for p := range producers {
		want += sent[p] * batch
		for i := range sent[p] {
			for j := range batch {
				if _, ok := answers[idOf(p, i, j)]; !ok { // not require.Contains: it scans the map
					t.Fatalf("acknowledged push of %s: no answer recorded", idOf(p, i, j))
				}
			}
		}
	}
	require.Len(t, answers, want, "only the producers' ids were answered")

	// Stored once: every answer of an id names one partition and offset,
	// and no two ids share one.
	dupAnswers := requireStoredOnce(t, answers)

	// Delivered: every id, at its offset; a second delivery is a
	// redelivery, with a higher attempt.
	lost, redelivered := 0, 0
	for id, as := range answers {
		ds := delivered[id]
		if len(ds) == 0 {
			lost++
			continue
		}
		attempts := map[int]bool{}
		for _, d := range ds {
			require.Equal(t, as[0].offset, d.offset, "id %s delivered at another offset", id)
			if attempts[d.attempt] {
				t.Logf("the pops and acks of %s's partition near its offset, as the brokers logged them:\n%s", id, leasesOf(bs, d.lease, d.offset))
			}
			require.False(t, attempts[d.attempt], "id %s delivered twice as attempt %d: %+v (kill at %v, restarts from %v)",
				id, d.attempt, ds, killAt.Sub(started), rollAt.Sub(started))
			attempts[d.attempt] = true
		}
		if len(ds) > 1 {
			redelivered++
		}
	}
	require.Zero(t, lost, "acknowledged messages never delivered")
	require.Len(t, delivered, total, "nothing but the pushed ids was delivered")

	// Order per producer and partition: offsets grow with the batch
	// number, and so do first deliveries.
	orderViolations := 0
	lastOffset := map[string]int64{} // producer/partition -> last offset
	for p := range producers {
		for i := range sent[p] {
			for j := range batch {
				a := answers[idOf(p, i, j)][0]
				k := strconv.Itoa(p) + "/" + a.partition
				if last, ok := lastOffset[k]; ok && a.offset <= last {
					orderViolations++
				}
				lastOffset[k] = a.offset
			}
		}
	}
	for part, ids := range firstSeen {
		lastSeq := map[int][2]int{} // producer -> (batch, index) last seen
		for _, id := range ids {
			var p, i, j int
			_, err := fmt.Sscanf(id, "%d-%d-%d", &p, &i, &j)
			require.NoError(t, err, id)
			if l, ok := lastSeq[p]; ok && (i < l[0] || i == l[0] && j < l[1]) {
				orderViolations++
				t.Errorf("partition %s: %s first delivered after %d-%d-%d", part, id, p, l[0], l[1])
			}
			lastSeq[p] = [2]int{i, j}
		}
	}
	require.Zero(t, orderViolations, "order violations per producer and partition")

	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	info, err := admin.Info(ictx, queue)
	require.NoError(t, err)
	require.EqualValues(t, total, info.Messages, "the queue stores each id once")

	t.Logf("%d messages acknowledged, 0 lost, %d order violations; %d push attempts unanswered and retried "+
		"(%d from the kill to the rolling restart, %d in the rolling restart), %d answers were duplicates; %d messages delivered again after a lease ran out; %d acks failed",
		total, orderViolations, retries.Load(), retriesAtRoll-retriesAtKill, retries.Load()-retriesAtRoll, dupAnswers, redelivered, ackErrors.Load())
	t.Logf("longest time without a successful push, of all producers (of one producer): %.2f s (%.2f s) around the SIGKILL, "+
		"%.2f s (%.2f s) over the rolling restart; SIGTERM to exit per bridge: %v",
		killGap.Seconds(), killClientGap.Seconds(), rollGap.Seconds(), rollClientGap.Seconds(), stopFor)
}

// newClusterProcs makes n brokers on one PostgreSQL that form one NATS
// cluster: each has a route listener of its own and routes to the others.
// extra flags go to every broker.
func newClusterProcs(t *testing.T, pgURL string, n int, extra ...string) []*brokerProc {
	t.Helper()
	routes := make([]string, n)
	listen := make([]string, n)
	for i := range n {
		addr, err := freeport.LoopbackAddr()
		require.NoError(t, err)
		listen[i] = addr
		routes[i] = "nats-route://" + listen[i]
	}
	bs := make([]*brokerProc, n)
	for i := range n {
		b := newBrokerProc(t, pgURL)
		others := slices.Delete(slices.Clone(routes), i, i+1)
		b.args = append(b.args, "-server-name", fmt.Sprint("comb-", i), "-cluster-name", "comb",
			"-cluster-listen", listen[i], "-routes", strings.Join(others, ","))
		b.args = append(b.args, extra...)
		bs[i] = b
	}
	return bs
}

// waitRoutes waits until every broker's NATS server routes to every other:
// a subscription on a connection to one broker is answered from each of
// the others.
func waitRoutes(t *testing.T, bs []*brokerProc) {
	t.Helper()
	conns := make([]*nats.Conn, len(bs))
	for i, b := range bs {
		nc, err := nats.Connect(b.url)
		require.NoError(t, err)
		defer nc.Close()
		conns[i] = nc
		_, err = nc.Subscribe("probe."+strconv.Itoa(i), func(m *nats.Msg) { _ = m.Respond(nil) })
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
	}
	waitFor(t, 20*time.Second, "every broker routes to every other", func() bool {
		for i, nc := range conns {
			for j := range conns {
				if i == j {
					continue
				}
				if _, err := nc.Request("probe."+strconv.Itoa(j), nil, 200*time.Millisecond); err != nil {
					return false
				}
			}
		}
		return true
	})
}

// terminate stops the broker as an orchestrator does, with SIGTERM: it
// drains, then its NATS server goes into lame duck mode. It waits until
// the process is gone.
func (b *brokerProc) terminate() { b.signalAndWait(syscall.SIGTERM, 30*time.Second) }

// leasesOf returns the lines of the brokers' logs where a pop leased
// offsets on the partition of lease (its id is in every lease id,
// "l-<id>-…") or an ack named them, within 100 of offset: what led to a
// delivery of offset, in the order of the logs.
func leasesOf(bs []*brokerProc, lease string, offset int64) string {
	parts := strings.Split(lease, "-")
	if len(parts) < 3 {
		return "(no lease id)"
	}
	num := regexp.MustCompile(`\b(from|to|offset)=(\d+)`)
	var out strings.Builder
	for i, b := range bs {
		for j, path := range b.logs {
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			for l := range strings.Lines(string(data)) {
				if !strings.Contains(l, " partition_id="+parts[1]+" ") || !strings.Contains(l, "component=store") {
					continue
				}
				for _, m := range num.FindAllStringSubmatch(l, -1) {
					if v, _ := strconv.ParseInt(m[2], 10, 64); v >= offset-100 && v <= offset+100 {
						fmt.Fprintf(&out, "broker %d, run %d: %s", i, j+1, l)
						break
					}
				}
			}
		}
	}
	return out.String()
}
