package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/web"
)

// screenshotFile is the screenshot the README shows; the test writes it
// only when COMB_UPDATE_SCREENSHOT=1.
const screenshotFile = "../docs/status-page.png"

// chromium returns Debian's chromium. It skips the test when chromium is
// missing, except in CI (CI=true), where .ci/run installs it and a skip
// would hide that the page went untested.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is missing, and CI must run the page in it: .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium is not installed (apt-get install chromium); CI runs this test")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile and returns a
// tab's context; the browser stops when the test ends. The flags keep it
// off the network: this machine's is closed, and the page needs nothing
// from outside.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	// The first run starts the browser; its context must outlive the test's
	// timeouts, which apply to later runs only.
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	return ctx
}

// rendered is what the page shows of the queue "orders", read from the DOM,
// and the overview it drew it from.
type rendered struct {
	Health   map[string]string `json:"health"`
	Spool    string            `json:"spool"`
	Depth    string            `json:"depth"`
	Messages string            `json:"messages"`
	Pushed   string            `json:"pushed"`
	Dead     string            `json:"dead"`
	PushRate string            `json:"push_rate"`
	PopRate  string            `json:"pop_rate"`
	AckRate  string            `json:"ack_rate"`
	Groups   []struct {
		Name, Pending, Leased string
	} `json:"groups"`
	Lines      map[string]int `json:"lines"` // chart paths drawn per series
	Partitions [][]string     `json:"partitions"`
	Detail     [][]string     `json:"detail_groups"`
	DeadRows   []string       `json:"dead_rows"`
	Overview   web.Overview   `json:"overview"`
}

const readPage = `(() => {
  const q = document.querySelector('article.queue[data-queue="orders"][data-tenant=""]');
  if (!q || !window.combOverview) return null;
  const f = (n) => q.querySelector('[data-field="' + n + '"]').textContent;
  const rows = (sel) => [...document.querySelectorAll(sel + " tr")].slice(1).map((r) => [...r.cells].map((c) => c.textContent));
  const lines = {};
  for (const s of ["push", "pop", "ack", "depth"]) lines[s] = [...q.querySelectorAll("path.s-" + s)].filter((p) => p.getAttribute("d").includes("L")).length;
  const health = {};
  for (const c of document.querySelectorAll("[data-health]")) health[c.dataset.health] = c.querySelector(".state").textContent;
  return {
    health, spool: document.querySelector('[data-health="spool"] .detail').textContent,
    depth: f("depth"), messages: f("messages"), pushed: f("pushed"), dead: f("dead-letters"),
    push_rate: f("push-rate"), pop_rate: f("pop-rate"), ack_rate: f("ack-rate"),
    groups: [...q.querySelectorAll("tr[data-group]")].map((r) => ({
      Name: r.dataset.group, Pending: r.querySelector('[data-field="pending"]').textContent,
      Leased: r.querySelector('[data-field="leased"]').textContent })),
    lines, partitions: rows("#partitions"), detail_groups: rows("#groups"),
    dead_rows: [...document.querySelectorAll("#dlq tr[data-dlq]")].map((r) => r.dataset.dlq),
    overview: window.combOverview,
  };
})()`

// rateText formats a rate as the page does.
func rateText(r float64) string {
	if r < 10 {
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatInt(int64(math.Round(r)), 10) // the test's figures stay below 1,000
}

// TestPageInChromium loads the page from a real broker into a real
// Chromium after known pushes, pops and acks, and checks that what it
// renders is what info says.
func TestPageInChromium(t *testing.T) {
	path := chromium(t)
	update := os.Getenv("COMB_UPDATE_SCREENSHOT") == "1"
	interval := 200 * time.Millisecond
	if update {
		interval = time.Second // a screenshot whose charts span a minute
	}
	env := startBroker(t, interval, update)
	tr := scenario(t, env)
	if update {
		stop := busy(t, env)
		defer stop()
		// Charts that span a minute: wait for 60 samples of the traffic.
		require.Eventually(t, func() bool {
			o := overview(t, env)
			q, ok := findQueue(o, domain.Global("payments"))
			return ok && len(o.Times) >= 60 && q.Series.Depth[len(o.Times)-60] != nil
		}, 3*time.Minute, time.Second)
	}
	ctx := newBrowser(t, path)
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(tctx, chromedp.Navigate(env.Broker.HTTPURL()+"/#tenant=&queue=orders")))

	info, err := env.Store.Info(ctxT(t), domain.InfoParams{Queue: domain.Global("orders"), Limit: 1000})
	require.NoError(t, err)
	var pushed int64
	for _, p := range info.Partitions {
		pushed += p.NextOffset
	}

	// Wait for the page to have drawn the figures, its charts and the
	// queue's detail (fetched after the overview).
	var got rendered
	require.Eventually(t, func() bool {
		raw, err := chromedp.Run(tctx, chromedp.Evaluate[json.RawMessage](readPage))
		if err != nil || string(raw) == "null" {
			return false
		}
		got = rendered{}
		require.NoError(t, json.Unmarshal(raw, &got), "%s", raw)
		return got.Messages == strconv.FormatInt(info.Messages, 10) && len(got.DeadRows) > 0 && got.Lines["push"] > 0
	}, 30*time.Second, 100*time.Millisecond, "the page shows orders: last read %+v", got)

	require.Equal(t, map[string]string{"postgres": "reachable", "nats": "ready", "bridge": "running",
		"uptime": got.Health["uptime"], "spool": "none"}, got.Health)
	require.Equal(t, web.NoSpool, got.Spool)
	var depth int64
	for _, g := range info.Groups {
		depth = max(depth, g.Pending)
	}
	require.Equal(t, strconv.FormatInt(depth, 10), got.Depth, "the largest group's pending")
	require.Equal(t, strconv.FormatInt(pushed, 10), got.Pushed)
	require.Equal(t, strconv.FormatInt(info.DeadLetters, 10), got.Dead)
	require.Len(t, got.Groups, len(info.Groups))
	for i, g := range info.Groups {
		require.Equal(t, g.Name, got.Groups[i].Name)
		require.Equal(t, strconv.FormatInt(g.Pending, 10), got.Groups[i].Pending, "pending of %s", g.Name)
		require.Equal(t, strconv.FormatInt(g.Leased, 10), got.Groups[i].Leased, "leased of %s", g.Name)
		require.Equal(t, []string{g.Name, strconv.FormatInt(g.Pending, 10), strconv.FormatInt(g.Leased, 10)}, got.Detail[i])
	}
	require.Len(t, got.Partitions, len(info.Partitions))
	for i, p := range info.Partitions {
		require.Equal(t, []string{p.Name, strconv.FormatInt(p.NextOffset, 10), strconv.FormatInt(p.LowOffset, 10),
			strconv.FormatInt(p.NextOffset-p.LowOffset, 10)}, got.Partitions[i])
	}
	require.Len(t, got.DeadRows, int(info.DeadLetters))

	// The rates the page shows are those of the overview it drew, and they
	// add up to the traffic.
	q, ok := findQueue(got.Overview, domain.Global("orders"))
	require.True(t, ok)
	require.NotNil(t, q.Rates)
	require.Equal(t, rateText(q.Rates.Push), got.PushRate)
	require.Equal(t, rateText(q.Rates.Pop), got.PopRate)
	require.Equal(t, rateText(q.Rates.Ack), got.AckRate)
	o := got.Overview
	require.InDelta(t, float64(tr.pushed), integrate(o.Times, q.Series.Push), 0.05*float64(tr.pushed))
	require.InDelta(t, float64(tr.popped), integrate(o.Times, q.Series.Pop), 0.05*float64(tr.popped))
	require.InDelta(t, float64(tr.acked), integrate(o.Times, q.Series.Ack), 0.05*float64(tr.acked))
	for _, s := range []string{"push", "pop", "ack", "depth"} {
		require.Equal(t, 1, got.Lines[s], "one %s line on the charts", s)
	}

	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	img, err := png.DecodeConfig(bytes.NewReader(shot))
	require.NoError(t, err)
	require.Equal(t, 1280, img.Width)
	if update {
		require.NoError(t, os.WriteFile(screenshotFile, shot, 0o644))
		t.Logf("wrote %s (%dx%d)", screenshotFile, img.Width, img.Height)
	}
}

// busy runs traffic on two more queues until the returned stop is called,
// so that the screenshot's charts have something to show: pushes whose
// rate swings, and a consumer per queue that keeps up.
func busy(t *testing.T, env *combtest.Env) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := comb.New(env.NC)
	var wg sync.WaitGroup
	for qi, queue := range []string{"payments", "events"} {
		_, err := c.Configure(ctx, queue, comb.ConfigPatch{})
		require.NoError(t, err)
		seek(t, env, queue, "workers")
		wg.Go(func() {
			start := time.Now()
			for ctx.Err() == nil {
				phase := time.Since(start).Seconds() / 10
				n := 5 + int(20*(1+math.Sin(phase+float64(qi)*2)))
				msgs := make([]comb.Message, n)
				for i := range msgs {
					msgs[i] = comb.Message{Partition: fmt.Sprintf("p%d", i%(2+qi)), Data: []byte(`{"ok":true}`)}
				}
				_, _ = c.Push(ctx, queue, msgs)    // errors only once stopping
				time.Sleep(100 * time.Millisecond) // pacing the traffic, not waiting for a condition
			}
		})
		wg.Go(func() {
			start := time.Now()
			for ctx.Err() == nil {
				// The consumer slows down and catches up again.
				batch := 10 + int(15*(1+math.Cos(time.Since(start).Seconds()/8)))
				got, err := c.Pop(ctx, queue, comb.PopOptions{Group: "workers", Max: batch, Wait: 200 * time.Millisecond})
				if err == nil && len(got) > 0 {
					last := got[len(got)-1]
					_, _ = c.Ack(ctx, queue, "workers", []comb.Ack{{Partition: last.Partition, Offset: last.Offset, Lease: last.Lease}})
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}
