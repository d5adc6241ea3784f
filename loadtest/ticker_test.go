package loadtest

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves: each timer the ticker arms is
// handed to the test on armed, and fires when the test sends on it.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	armed chan fakeTimer
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func (f *fakeClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) set(t time.Time) {
	f.mu.Lock()
	f.t = t
	f.mu.Unlock()
}

func (f *fakeClock) timer(d time.Duration) (<-chan time.Time, func()) {
	ft := fakeTimer{at: f.now().Add(d), c: make(chan time.Time, 1)}
	f.armed <- ft
	return ft.c, func() {}
}

// TestTickerSamplesBetweenPushes: in open loop the ticker samples and
// prints half a push interval after each whole second, where no push is
// due; in closed loop, on the second; never more than half a second
// after it.
func TestTickerSamplesBetweenPushes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		phase time.Duration
	}{
		{"ten pushes a second", Config{Mode: ModeOpenLoop, Rate: 1000, PushBatch: 100}, 50 * time.Millisecond},
		{"a thousand", Config{Mode: ModeOpenLoop, Rate: 1000, PushBatch: 1}, 500 * time.Microsecond},
		{"one in ten seconds", Config{Mode: ModeOpenLoop, Rate: 10, PushBatch: 100}, 500 * time.Millisecond},
		{"closed loop", Config{Mode: ModeClosed, Rate: 1000, PushBatch: 100}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const interval = 2 * time.Second
			tc.cfg.Interval = interval
			start := time.Unix(1_700_000_000, 0)
			clk := &fakeClock{t: start, armed: make(chan fakeTimer)}
			log := slog.New(slog.DiscardHandler)
			r := &runner{cfg: &tc.cfg, log: log, out: &printer{w: &bytes.Buffer{}}, lat: newLatencies()}
			smp := newSampler(context.Background(), &Config{}, TargetJetStream, 0, log)
			defer smp.close()
			tk := newTickerClock(r, smp, clk, start, "")
			done := make(chan struct{})
			go func() {
				defer close(done)
				tk.loop()
			}()
			// Every timer fires on time, for four and a half seconds.
			for {
				ft := <-clk.armed
				if ft.at.After(start.Add(4500 * time.Millisecond)) {
					break
				}
				clk.set(ft.at)
				ft.c <- ft.at
			}
			tk.stop()
			<-done
			require.GreaterOrEqual(t, len(tk.samples), 4)
			for i, s := range tk.samples[:4] {
				require.InDelta(t, float64(i+1)+tc.phase.Seconds(), s.At, 1e-9, "sample %d", i)
			}
			require.GreaterOrEqual(t, len(tk.rows), 2)
			for i, row := range tk.rows[:2] {
				require.InDelta(t, float64(2*(i+1))+tc.phase.Seconds(), row.At, 1e-9, "line %d", i)
			}
		})
	}
}

// TestTickerIntervalSpans drives the ticker on a fake clock whose timers
// fire late, by up to 300 ms and once by 2.5 s, for 65.4 s of a 10 s
// interval: six lines, each at least 10 s after the previous one, never
// 9 s (the 0.9 × interval lines of old), then a last one of the 5-odd
// seconds left that says so. Every line's span, printed and in
// intervals.csv, is the time since the previous line, and its counts are
// over exactly that span (the counter is the clock in milliseconds, so
// every rate is 1000/s).
func TestTickerIntervalSpans(t *testing.T) {
	const interval = 10 * time.Second
	start := time.Unix(1_700_000_000, 0)
	end := start.Add(65*time.Second + 400*time.Millisecond)
	clk := &fakeClock{t: start, armed: make(chan fakeTimer)}
	log := slog.New(slog.DiscardHandler)
	var out bytes.Buffer
	r := &runner{cfg: &Config{Interval: interval}, log: log, out: &printer{w: &out}, lat: newLatencies()}
	smp := newSampler(context.Background(), &Config{}, TargetJetStream, 0, log)
	defer smp.close()
	dir := t.TempDir()
	tk := newTickerClock(r, smp, clk, start, dir)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk.loop()
	}()

	rng := rand.New(rand.NewPCG(1, 2))
	for step := 0; ; step++ {
		ft := <-clk.armed
		if ft.at.After(end) {
			break
		}
		late := time.Duration(rng.IntN(300)) * time.Millisecond
		if step == 25 {
			late = 2500 * time.Millisecond // a stall: the samples catch up
		}
		now := ft.at
		if cur := clk.now(); cur.After(now) {
			now = cur // a timer armed in the past fires at once
		}
		now = now.Add(late)
		clk.set(now)
		r.c.pushed.Store(now.Sub(start).Milliseconds())
		r.lat.record([]int64{1000})
		ft.c <- now
	}
	// The ticker waits on a timer due after end: stop it at end.
	stopAt := end
	if cur := clk.now(); cur.After(stopAt) {
		stopAt = cur
	}
	clk.set(stopAt)
	r.c.pushed.Store(stopAt.Sub(start).Milliseconds())
	tk.stop()
	<-done
	t.Log("\n" + out.String())

	rows := tk.rows
	require.Len(t, rows, 7, "six full intervals and the last, partial one:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, len(rows))
	prevAt := 0.0
	for i, row := range rows {
		require.InDelta(t, row.At-prevAt, row.Secs, 1e-9, "line %d: its span is the time since the previous line", i)
		if i < len(rows)-1 {
			require.GreaterOrEqual(t, row.Secs, interval.Seconds(), "line %d came early", i)
			require.Less(t, row.Secs, interval.Seconds()+2.5+0.3+1e-9, "line %d came later than its timer", i)
			require.NotContains(t, lines[i], "last")
		} else {
			require.InDelta(t, stopAt.Sub(start).Seconds(), row.At, 1e-9)
			require.Less(t, row.Secs, interval.Seconds())
			require.GreaterOrEqual(t, row.Secs, 0.5)
			require.Contains(t, lines[i], fmt.Sprintf("] last %.1fs: offered", row.Secs))
		}
		require.Equal(t, int64(math.Round(row.Secs*1000)), row.Counts.Pushed, "line %d: counts over its span", i)
		require.Contains(t, lines[i], " 1000 in ", "line %d: the rate over its span", i)
		require.Positive(t, row.Latency.Count)
		prevAt = row.At
	}

	// One sample per second of the run, none early, and the last at stop.
	require.Len(t, tk.samples, 66)
	for i, s := range tk.samples[:65] {
		require.GreaterOrEqual(t, s.At, float64(i+1), "sample %d came early", i)
	}

	f, err := os.Open(filepath.Join(dir, "intervals.csv"))
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Equal(t, intervalsHeader, recs[0])
	require.Equal(t, "seconds", recs[0][1])
	require.Len(t, recs, len(rows)+1)
	for i, rec := range recs[1:] {
		at, err := strconv.ParseFloat(rec[0], 64)
		require.NoError(t, err)
		secs, err := strconv.ParseFloat(rec[1], 64)
		require.NoError(t, err)
		require.InDelta(t, rows[i].At, at, 0.0005)
		require.InDelta(t, rows[i].Secs, secs, 0.0005)
		pushRate, err := strconv.ParseFloat(rec[10], 64)
		require.NoError(t, err)
		require.InDelta(t, 1000, pushRate, 0.0005, "row %d", i)
	}
}
