package loadtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// sample is one second of a run: the loader's figures and the sampler's.
type sample struct {
	At      float64 // seconds since the producers started
	Counts  Counts  // over the second
	Latency Percentiles
	Res     resourceSample
}

// intervalRow is one interval line.
type intervalRow struct {
	At      float64 // seconds since the producers started, at the line
	Secs    float64 // the interval's span as measured: since the previous line
	Counts  Counts
	Latency Percentiles
}

// clock is the ticker's time: the real one but in tests.
type clock interface {
	now() time.Time
	// timer returns a channel that receives once d has passed, and a
	// function that stops it.
	timer(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) now() time.Time { return time.Now() }

func (realClock) timer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// ticker drives the 1 Hz sampling and the interval lines, each on its own
// schedule: a sample on every second of the run, a line once Interval has
// passed since the previous one (the run's start for the first), so that a
// line's span is never shorter than Interval and is what it says. It owns
// the histograms and the rows kept for the report.
type ticker struct {
	r     *runner
	smp   *sampler
	clk   clock
	start time.Time
	phase time.Duration // samplePhase
	dir   string

	total    *hdrhistogram.Histogram
	second   *hdrhistogram.Histogram // since the last sample
	interval *hdrhistogram.Histogram // since the last interval line
	prev     Counts                  // at the last sample
	ivStart  Counts                  // at the last interval line
	ivAt     time.Time
	samples  []sample
	rows     []intervalRow

	samplesCSV   *csvFile
	intervalsCSV *csvFile

	quit     chan struct{}
	stopOnce sync.Once
}

// samplePhase is how long after each whole second of the run the ticker
// samples and prints. In open loop a push is due at every multiple of the
// push interval from the start, so on every whole second at the usual
// rates: the sampler's reads (/proc, PostgreSQL's statistics and the
// database's size) would run beside that push, in a loader and on cores
// it shares with the broker and PostgreSQL, and add to its latency
// (docs/benchmarks.md, "Push by push"). Half a push interval later they
// fall between two pushes. At most half a second; none in closed loop,
// which has no schedule.
func samplePhase(c *Config) time.Duration {
	if c.Mode != ModeOpenLoop || c.Rate <= 0 {
		return 0
	}
	return min(time.Duration(c.pushInterval())/2, time.Second/2)
}

func newTicker(r *runner, smp *sampler, start time.Time, dir string) *ticker {
	return newTickerClock(r, smp, realClock{}, start, dir)
}

func newTickerClock(r *runner, smp *sampler, clk clock, start time.Time, dir string) *ticker {
	t := &ticker{
		r: r, smp: smp, clk: clk, start: start, phase: samplePhase(r.cfg), dir: dir,
		total: newHistogram(), second: newHistogram(), interval: newHistogram(),
		ivAt: start, quit: make(chan struct{}),
	}
	if dir != "" {
		t.samplesCSV = openCSV(filepath.Join(dir, "samples.csv"), r.log, samplesHeader)
		t.intervalsCSV = openCSV(filepath.Join(dir, "intervals.csv"), r.log, intervalsHeader)
	}
	return t
}

func (t *ticker) stop() { t.stopOnce.Do(func() { close(t.quit) }) }

// loop samples on every second of the run (samplePhase after it) and
// prints a line whenever Interval has passed since the previous one (the
// first one samplePhase after its whole second), until stop; the last sample,
// partial, is taken at stop so no delivery goes unrecorded, and so is a
// last, shorter line when at least half a second has passed since the
// previous one. Times are the clock's, monotonic for the real one, and a
// line is due by its own time, not by a count of samples.
func (t *ticker) loop() {
	defer func() {
		t.samplesCSV.close()
		t.intervalsCSV.close()
	}()
	interval := t.r.cfg.Interval
	nextSample := t.start.Add(t.phase + time.Second)
	for {
		nextLine := t.ivAt.Add(interval)
		if t.ivAt.Equal(t.start) {
			nextLine = nextLine.Add(t.phase) // later lines keep it: each is due an interval after the last
		}
		wake := nextSample
		if nextLine.Before(wake) {
			wake = nextLine
		}
		c, stopTimer := t.clk.timer(wake.Sub(t.clk.now()))
		select {
		case <-t.quit:
			stopTimer()
			now := t.clk.now()
			t.tick(now)
			if now.Sub(t.ivAt) >= time.Second/2 {
				t.line(now)
			}
			return
		case <-c:
		}
		// Either may be due, or both; neither before its time.
		now := t.clk.now()
		if !now.Before(nextSample) {
			t.tick(now)
			nextSample = nextSample.Add(time.Second)
		}
		if !now.Before(nextLine) {
			t.line(now)
		}
	}
}

// collect moves the latencies recorded since the last collect into the
// run's, the second's and the interval's histograms.
func (t *ticker) collect() {
	h := t.r.lat.swap()
	t.total.Merge(h)
	t.second.Merge(h)
	t.interval.Merge(h)
}

// tick takes one sample, at now.
func (t *ticker) tick(now time.Time) {
	t.collect()
	cur := t.r.c.snapshot()
	s := sample{
		At:      now.Sub(t.start).Seconds(),
		Counts:  cur.sub(t.prev),
		Latency: percentiles(t.second),
		Res:     t.smp.sample(),
	}
	t.second.Reset()
	t.prev = cur
	t.samples = append(t.samples, s)
	t.samplesCSV.write(s.csv())
}

// line prints and records one interval line, at now: the figures since the
// previous line, over the time since it.
func (t *ticker) line(now time.Time) {
	t.collect()
	cur := t.r.c.snapshot()
	row := intervalRow{
		At:      now.Sub(t.start).Seconds(),
		Secs:    now.Sub(t.ivAt).Seconds(),
		Counts:  cur.sub(t.ivStart),
		Latency: percentiles(t.interval),
	}
	t.interval.Reset()
	t.ivStart = cur
	t.ivAt = now
	t.rows = append(t.rows, row)
	t.intervalsCSV.write(row.csv())
	t.r.printInterval(&row)
}

// resources sums the samples up: medians after the first fifth of the
// run (the warm-up), and the broker's largest resident memory.
func (t *ticker) resources() Resources {
	skip := len(t.samples) / 5
	steady := t.samples[skip:]
	med := func(get func(*resourceSample) float64) float64 {
		var vals []float64
		for i := range steady {
			if v := get(&steady[i].Res); !math.IsNaN(v) {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			return math.NaN()
		}
		slices.Sort(vals)
		return vals[len(vals)/2]
	}
	peak := math.NaN()
	for i := range t.samples {
		if v := t.samples[i].Res.BrokerRSS; !math.IsNaN(v) && (math.IsNaN(peak) || v > peak) {
			peak = v
		}
	}
	return Resources{
		BrokerRSSMB:    jsonFloat(med(func(r *resourceSample) float64 { return r.BrokerRSS })),
		BrokerRSSMaxMB: jsonFloat(peak),
		BrokerCPU:      jsonFloat(med(func(r *resourceSample) float64 { return r.BrokerCPU })),
		LoaderCPU:      jsonFloat(med(func(r *resourceSample) float64 { return r.LoaderCPU })),
		PGCPU:          jsonFloat(med(func(r *resourceSample) float64 { return r.PGCPU })),
		Commits:        jsonFloat(med(func(r *resourceSample) float64 { return r.Commits })),
		WALMBps:        jsonFloat(med(func(r *resourceSample) float64 { return r.WALBytes })),
		WALSyncs:       jsonFloat(med(func(r *resourceSample) float64 { return r.WALSyncs })),
		DBSizeMB:       jsonFloat(med(func(r *resourceSample) float64 { return r.DBSize })),
	}
}

// Resources are a run's steady-state resource figures; a figure the
// sampler could not read is null.
type Resources struct {
	BrokerRSSMB    jsonFloat `json:"broker_rss_mb"`
	BrokerRSSMaxMB jsonFloat `json:"broker_rss_max_mb"`
	BrokerCPU      jsonFloat `json:"broker_cpu_cores"`
	LoaderCPU      jsonFloat `json:"loader_cpu_cores"`
	PGCPU          jsonFloat `json:"postgres_cpu_cores"`
	Commits        jsonFloat `json:"commits_per_s"`
	WALMBps        jsonFloat `json:"wal_mb_per_s"`
	WALSyncs       jsonFloat `json:"wal_syncs_per_s"`
	DBSizeMB       jsonFloat `json:"db_size_mb"`
}

// jsonFloat is a float64 that is null in JSON when NaN.
type jsonFloat float64

// MarshalJSON writes null for NaN, else the number.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'f', -1, 64), nil
}

// UnmarshalJSON reads null as NaN.
func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = jsonFloat(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*f = jsonFloat(v)
	return err
}

var samplesHeader = []string{
	"elapsed_s", "offered", "pushed", "popped", "acked", "shed",
	"push_failed_requests", "pop_failed_requests", "ack_failed_requests",
	"e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms",
	"broker_rss_mb", "broker_cpu_cores", "loader_cpu_cores", "postgres_cpu_cores",
	"commits_per_s", "wal_mb_per_s", "wal_syncs_per_s", "db_size_mb",
}

func (s *sample) csv() []string {
	c := &s.Counts
	lat := func(v float64) string {
		if s.Latency.Count == 0 {
			return ""
		}
		return fmtFloat(v)
	}
	return []string{
		fmtFloat(s.At), itoa(c.Offered), itoa(c.Pushed), itoa(c.Popped), itoa(c.Acked), itoa(c.Shed),
		itoa(c.PushFailed), itoa(c.PopFailed), itoa(c.AckFailed),
		lat(s.Latency.P50), lat(s.Latency.P99), lat(s.Latency.P999),
		fmtFloat(s.Res.BrokerRSS), fmtFloat(s.Res.BrokerCPU), fmtFloat(s.Res.LoaderCPU), fmtFloat(s.Res.PGCPU),
		fmtFloat(s.Res.Commits), fmtFloat(s.Res.WALBytes), fmtFloat(s.Res.WALSyncs), fmtFloat(s.Res.DBSize),
	}
}

var intervalsHeader = []string{
	"elapsed_s", "seconds", "offered", "pushed", "popped", "acked",
	"push_failed_requests", "pop_failed_requests", "ack_failed_requests", "shed",
	"push_rate", "pop_rate", "e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms", "ack_rtt_ms",
}

func (r *intervalRow) csv() []string {
	c := &r.Counts
	return []string{
		fmtFloat(r.At), fmtFloat(r.Secs), itoa(c.Offered), itoa(c.Pushed), itoa(c.Popped), itoa(c.Acked),
		itoa(c.PushFailed), itoa(c.PopFailed), itoa(c.AckFailed), itoa(c.Shed),
		fmtFloat(float64(c.Pushed) / r.Secs), fmtFloat(float64(c.Popped) / r.Secs),
		fmtFloat(r.Latency.P50), fmtFloat(r.Latency.P99), fmtFloat(r.Latency.P999), fmtFloat(ms(c.ackRTT())),
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// fmtFloat writes NaN as an empty cell.
func fmtFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// csvFile writes rows as they come, so a run killed halfway leaves its
// figures so far. Cells never hold commas or quotes, so no quoting.
type csvFile struct {
	f *os.File
	w *bufio.Writer
}

func openCSV(path string, log interface{ Warn(string, ...any) }, header []string) *csvFile {
	f, err := os.Create(path)
	if err != nil {
		log.Warn("loadtest: cannot write CSV", "path", path, "err", err)
		return nil
	}
	c := &csvFile{f: f, w: bufio.NewWriter(f)}
	c.write(header)
	return c
}

func (c *csvFile) write(cells []string) {
	if c == nil {
		return
	}
	for i, v := range cells {
		if i > 0 {
			c.w.WriteByte(',')
		}
		c.w.WriteString(v)
	}
	c.w.WriteByte('\n')
	c.w.Flush()
}

func (c *csvFile) close() {
	if c == nil {
		return
	}
	c.w.Flush()
	c.f.Close()
}

// writeFiles writes the summary and the report of a finished run.
func (t *ticker) writeFiles(res *Result) error {
	if err := writeJSON(filepath.Join(t.dir, "summary.json"), res); err != nil {
		return err
	}
	if !t.r.cfg.Report {
		return nil
	}
	if err := writeReport(filepath.Join(t.dir, "report.png"), res, t.samples); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
