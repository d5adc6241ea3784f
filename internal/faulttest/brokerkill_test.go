//go:build linux

package faulttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/cli"
	"github.com/combmq/comb/internal/freeport"
	"github.com/combmq/comb/internal/pgtest"
)

// brokerChildEnv makes this test binary act as `comb` (see init), so the
// broker the test kills is the real `comb serve` in a process of its own,
// without a `go build`.
const brokerChildEnv = "COMB_FAULTTEST_BROKER_CHILD"

// init runs before TestMain, so a child started as the broker runs `comb`
// and exits without starting the test binary's own PostgreSQL cluster.
func init() {
	if os.Getenv(brokerChildEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:]))
	}
}

// TestBrokerKilledMidLoad SIGKILLs a `comb serve` process while producers
// push with producer ids into a queue with a dedup window and a consumer
// group drains it under leases, then starts a new broker on the same port
// and PostgreSQL. Producers retry every push that got no answer (a timeout,
// or no responder while the broker was down) with the same ids, which dedup
// makes safe. Afterwards: every id is stored exactly once (the answers of
// all attempts agree on its offset, and the queue holds as many messages as
// there were ids), every message is delivered and completed, and the
// messages under a lease nobody will ack — a consumer that died with its
// broker — come back once the lease expires, with their attempt counted.
//
// It does not run in parallel: the PostgreSQL crash test of this package
// would turn this test's pushes into 503s, which it does not expect.
// connectForever connects to a broker that is killed and comes back: it
// never gives up reconnecting, and retries quickly. The connection closes
// with the test.
func connectForever(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url,
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func TestBrokerKilledMidLoad(t *testing.T) {
	const (
		producers  = 4
		perProd    = 40 // push requests per producer
		batch      = 5
		partitions = 4
		total      = producers * perProd * batch
		leaseMS    = 3000 // how long an abandoned lease holds its messages
		queue      = "killed"
		group      = "g"
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	b := newBrokerProc(t, pgtest.URL(t))
	b.start()

	nc := connectForever(t, b.url)
	c := comb.New(nc, comb.WithTimeout(2*time.Second))
	_, err := c.Configure(ctx, queue, comb.ConfigPatch{LeaseMS: comb.Int64(leaseMS), DedupWindowS: comb.Int64(600)})
	require.NoError(t, err)

	var (
		mu         sync.Mutex
		answers    = map[string][]pushAnswer{} // producer id -> every answer its pushes got
		delivered  = map[string]map[int64]bool{}
		maxAttempt = map[string]int{}
		answered   atomic.Int64 // messages whose push was answered
		retries    atomic.Int64 // push attempts that got no answer
	)

	// Producers: each message's id and data name it; a push that got no
	// answer is sent again, same batch, same ids.
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProd {
				msgs := make([]comb.Message, batch)
				for j := range msgs {
					id := fmt.Sprintf("%d-%d-%d", p, i, j)
					msgs[j] = comb.Message{
						Partition: "p" + strconv.Itoa((p+i+j)%partitions),
						ID:        id,
						Data:      []byte(strconv.Quote(id)),
					}
				}
				res, err := pushRetrying(ctx, c, queue, msgs, &retries)
				if err != nil {
					if ctx.Err() == nil { // else the test is already failing
						t.Errorf("push %d-%d: %v", p, i, err)
					}
					return
				}
				mu.Lock()
				for j, r := range res {
					answers[msgs[j].ID] = append(answers[msgs[j].ID], pushAnswer{r.Partition, r.Offset, r.Status})
				}
				mu.Unlock()
				answered.Add(int64(len(res)))
			}
		})
	}
	producersDone := make(chan struct{})
	go func() { wg.Wait(); close(producersDone) }()
	// On an early failure, stop the producers before the test ends: they
	// report through t.
	defer func() { cancel(); <-producersDone }()

	// A consumer that dies with its broker: it leases a batch and never
	// acks it. Popped before the real consumer starts, so it gets one.
	var held []comb.Delivery
	for deadline := time.Now().Add(10 * time.Second); len(held) == 0; {
		require.True(t, time.Now().Before(deadline), "the abandoned consumer never got a message")
		held, err = c.Pop(ctx, queue, comb.PopOptions{Group: group, Max: batch, Wait: 500 * time.Millisecond})
		require.NoError(t, err)
	}

	var ackErrors atomic.Int64
	cctx, cstop := context.WithCancel(ctx)
	var consumeErr error
	consumed := make(chan struct{})
	defer func() { cstop(); <-consumed }()
	go func() {
		defer close(consumed)
		consumeErr = c.Consume(cctx, queue, comb.ConsumeOptions{Group: group, Max: 20, Partitions: 2,
			Wait: 200 * time.Millisecond, Concurrency: 2,
			OnAckError: func(error) { ackErrors.Add(1) }},
			func(_ context.Context, ds []comb.Delivery) error {
				mu.Lock()
				defer mu.Unlock()
				for _, d := range ds {
					if string(d.Data) != strconv.Quote(d.ID) {
						t.Errorf("delivery %s/%d: id %q with data %s", d.Partition, d.Offset, d.ID, d.Data)
					}
					if delivered[d.ID] == nil {
						delivered[d.ID] = map[int64]bool{}
					}
					delivered[d.ID][d.Offset] = true
					maxAttempt[d.ID] = max(maxAttempt[d.ID], d.Attempt)
				}
				return nil
			})
	}()

	// Kill the broker a third of the way in, under load.
	waitFor(t, 20*time.Second, "a third of the messages answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		// Producer 0's first batch is sent again after the restart.
		return answered.Load() >= total/3 && len(answers["0-0-0"]) > 0
	})
	b.kill()
	// Stay down a while, on purpose: requests in flight time out and
	// requests sent now wait in the client's reconnect buffer.
	time.Sleep(500 * time.Millisecond)
	b.start()

	// A producer whose reply was lost sends its batch again: the new broker
	// must find every id already stored, at the offsets first answered.
	again := make([]comb.Message, batch)
	for j := range again {
		id := fmt.Sprintf("0-0-%d", j)
		again[j] = comb.Message{Partition: "p" + strconv.Itoa(j%partitions), ID: id, Data: []byte(strconv.Quote(id))}
	}
	res, err := pushRetrying(ctx, c, queue, again, &retries)
	require.NoError(t, err)
	mu.Lock()
	for j, r := range res {
		answers[again[j].ID] = append(answers[again[j].ID], pushAnswer{r.Partition, r.Offset, r.Status})
	}
	mu.Unlock()
	for j, r := range res { // checked outside mu: a failure waits for the consumer, which takes it
		require.Equal(t, comb.StatusDuplicate, r.Status, "%s pushed again after the restart", again[j].ID)
	}

	select {
	case <-producersDone:
	case <-time.After(30 * time.Second):
		t.Fatal("producers did not finish")
	}
	require.False(t, t.Failed(), "a producer failed")

	// Every message is delivered and the group completes them all,
	// including those of the abandoned lease once it has expired.
	waitCompleted(ctx, t, 20*time.Second, c, queue, group, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) >= total
	})
	cstop()
	<-consumed
	require.NoError(t, consumeErr)

	mu.Lock()
	defer mu.Unlock()
	// Dedup held across the kill: every attempt at an id was answered with
	// the same partition and offset, and no two ids share an offset.
	require.Len(t, answers, total, "every push was retried until answered")
	duplicates := requireStoredOnce(t, answers)
	for id, as := range answers {
		require.Equal(t, map[int64]bool{as[0].offset: true}, delivered[id], "id %s delivered at other offsets", id)
	}
	require.Len(t, delivered, total, "nothing but the pushed ids was delivered")

	info, err := c.Info(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, total, info.Messages, "the queue stores each id once")
	var span int64
	for _, p := range info.Partitions {
		span += p.NextOffset - p.LowOffset
	}
	require.EqualValues(t, total, span, "no offset was spent on a second copy")

	// The abandoned lease expired and its messages came back.
	for _, d := range held {
		require.GreaterOrEqual(t, maxAttempt[d.ID], 2, "message %s of the abandoned lease was not delivered again", d.ID)
	}
	redelivered := 0
	for _, a := range maxAttempt {
		if a > 1 {
			redelivered++
		}
	}
	t.Logf("%d messages; %d push attempts unanswered and retried; %d answers were duplicates; "+
		"%d messages delivered more than once; %d acks failed", total, retries.Load(), duplicates, redelivered, ackErrors.Load())
	require.Positive(t, retries.Load(), "the kill was noticed by the producers")
}

// pushRetrying pushes msgs until the broker answers, sending the same
// messages (the same producer ids) again after a timeout or while no broker
// listens. Any other error is a failure.
func pushRetrying(ctx context.Context, c *comb.Client, queue string, msgs []comb.Message, retries *atomic.Int64) ([]comb.PushResult, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 20 * time.Millisecond
	bo.MaxInterval = 200 * time.Millisecond
	bo.MaxElapsedTime = 30 * time.Second
	return backoff.RetryWithData(func() ([]comb.PushResult, error) {
		res, err := c.Push(ctx, queue, msgs)
		if err == nil {
			return res, nil
		}
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
			errors.Is(err, nats.ErrConnectionReconnecting) {
			retries.Add(1)
			return nil, err
		}
		return nil, backoff.Permanent(err)
	}, backoff.WithContext(bo, ctx))
}

// waitCompleted waits until delivered says every message reached a
// consumer and group has nothing pending on queue: every message delivered
// and completed.
func waitCompleted(ctx context.Context, t *testing.T, d time.Duration, c *comb.Client, queue, group string, delivered func() bool) {
	t.Helper()
	waitFor(t, d, "every message delivered and completed", func() bool {
		if !delivered() {
			return false
		}
		info, err := c.Info(ctx, queue)
		if err != nil {
			return false // a slow reply on a loaded machine: ask again
		}
		for _, g := range info.Groups {
			if g.Name == group {
				return g.Pending == 0
			}
		}
		return false
	})
}

// waitFor polls cond every 20 ms until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventually(d, cond) {
		t.Fatalf("not within %s: %s", d, what)
	}
}

// eventually polls cond every 20 ms and reports whether it held within d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// brokerProc is a `comb serve` child process that can be killed and started
// again on the same NATS port, PostgreSQL and data directory.
type brokerProc struct {
	t      *testing.T
	url    string   // nats://127.0.0.1:<port>
	args   []string // serve's flags
	logDir string
	logs   []string      // one log file per start, stdout and stderr
	cmd    *exec.Cmd     // the current process
	exited chan struct{} // closed once the current process is reaped
}

func newBrokerProc(t *testing.T, pgURL string) *brokerProc {
	t.Helper()
	// A port of our own, free now: the restarted broker must listen where
	// the clients reconnect, so "127.0.0.1:0" will not do.
	addr, err := freeport.LoopbackAddr()
	require.NoError(t, err)
	// Without a URL the broker runs its own PostgreSQL in its data dir.
	pg := []string{"-postgres-url", pgURL}
	if pgURL == "" {
		pg = []string{"-pg-port", "0"}
	}
	b := &brokerProc{
		t:   t,
		url: "nats://" + addr,
		args: append([]string{"serve", "-nats-listen", addr, "-nats-http", "0", "-http", "127.0.0.1:0",
			"-data-dir", t.TempDir()}, pg...),
		logDir: t.TempDir(),
	}
	t.Cleanup(func() {
		if b.cmd != nil {
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
		for i, path := range b.logs {
			out, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("read the broker's log: %v", err)
				continue
			}
			// The child is built with the race detector when the test is.
			if bytes.Contains(out, []byte("WARNING: DATA RACE")) {
				t.Errorf("the broker reported a data race")
			}
			if t.Failed() {
				// Less the leases that pops and hand-offs take and the
				// acks, which the store logs at debug level (see
				// leasesOf): a line each.
				var kept bytes.Buffer
				for line := range bytes.Lines(out) {
					if !bytes.Contains(line, []byte(`msg="pop leased"`)) && !bytes.Contains(line, []byte(`msg="ack applied"`)) &&
						!bytes.Contains(line, []byte(`msg="ack failed"`)) && !bytes.Contains(line, []byte(`msg="handoff leased"`)) {
						kept.Write(line)
					}
				}
				t.Logf("comb serve, run %d:\n%s", i+1, kept.Bytes())
			}
		}
	})
	return b
}

// start runs `comb serve` and waits until it logs that it is ready.
func (b *brokerProc) start() {
	t := b.t
	t.Helper()
	path := filepath.Join(b.logDir, fmt.Sprintf("serve-%d.log", len(b.logs)+1))
	f, err := os.Create(path)
	require.NoError(t, err)
	b.logs = append(b.logs, path)
	cmd := exec.Command(os.Args[0], b.args...)
	// GOTRACEBACK=all: a SIGQUIT (dumpStacks) writes every goroutine.
	cmd.Env = append(os.Environ(), brokerChildEnv+"=1", "GOTRACEBACK=all")
	for _, kv := range os.Environ() { // the flags given must win
		if strings.HasPrefix(kv, "COMB_") && !strings.HasPrefix(kv, "COMB_TEST_") {
			k, _, _ := strings.Cut(kv, "=")
			cmd.Env = append(cmd.Env, k+"=")
		}
	}
	cmd.Stdout, cmd.Stderr = f, f
	// Should this test binary die without its cleanups, the broker dies too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = f.Close() // the child holds its own descriptor
	require.NoError(t, err)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	b.cmd, b.exited = cmd, exited

	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := os.ReadFile(path)
		require.NoError(t, err)
		if bytes.Contains(out, []byte(`msg="comb ready"`)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("comb serve not ready after 20 s:\n%s", out)
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(path)
			t.Fatalf("comb serve exited before it was ready (%v):\n%s", cmd.ProcessState, out)
		case <-tick.C:
		}
	}
}

// dataDir is the broker's -data-dir.
func (b *brokerProc) dataDir() string {
	for i, a := range b.args {
		if a == "-data-dir" {
			return b.args[i+1]
		}
	}
	return ""
}

// interrupt stops the broker as Ctrl-C does, and waits until it is gone.
func (b *brokerProc) interrupt() {
	t := b.t
	t.Helper()
	require.NoError(t, b.cmd.Process.Signal(os.Interrupt))
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("comb serve still running 30 s after SIGINT")
	}
	b.cmd = nil
}

// kill sends SIGKILL to the broker and waits until it is gone.
func (b *brokerProc) kill() { b.signalAndWait(syscall.SIGKILL, 10*time.Second) }

// dumpStacks ends the broker with SIGQUIT, so that its log, printed when
// the test fails, holds the stack of every goroutine: for a broker that
// stopped answering, where it waits.
func (b *brokerProc) dumpStacks() { b.signalAndWait(syscall.SIGQUIT, 10*time.Second) }

// signalAndWait sends sig to the broker and fails the test unless the
// process is gone within wait.
func (b *brokerProc) signalAndWait(sig syscall.Signal, wait time.Duration) {
	t := b.t
	t.Helper()
	require.NoError(t, syscall.Kill(b.cmd.Process.Pid, sig))
	select {
	case <-b.exited:
	case <-time.After(wait):
		t.Fatalf("comb serve still running %s after %s", wait, sig)
	}
	b.cmd = nil
}
