package loadtest

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"
)

// printer serialises lines to Run's writer.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

// printConfig prints the configuration first, in the reference loader's
// shape, so that an archived stdout says what was run.
func (r *runner) printConfig() {
	c := r.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "comb loadtest -mode %s -target %s -> queue=%s partitions=%d consumers=%d manualAck=%t ackAsync=%t ackInflight=%d\n",
		c.Mode, r.label, c.Queue, c.Partitions, c.Consumers, c.ManualAck, c.AckAsync, c.AckInflight)
	dedup := "dedup=off"
	if c.DedupWindow > 0 {
		dedup = fmt.Sprintf("dedup-window=%s, a unique producer id per message", c.DedupWindow)
	}
	if c.Headers > 0 {
		dedup += fmt.Sprintf(" | headers=%dB per message", c.Headers)
	}
	if c.Pipeline {
		dedup += fmt.Sprintf(" | pipeline: each batch settled by one transaction that acks it and pushes it to %s", PipelineQueue(c.Queue))
	}
	if c.Mode == ModeOpenLoop {
		fmt.Fprintf(&b, "  offered: rate=%d msg/s | push-batch=%d -> %.1f req/s across %d pacer workers | max-inflight=%d | payload=%dB (%s) | %s\n",
			c.Rate, c.PushBatch, c.requestsPerSecond(), c.Pacers, c.MaxInflight, c.Payload, c.Encoding, dedup)
	} else {
		fmt.Fprintf(&b, "  offered: as fast as answered | push-batch=%d | %d pacer workers, one push in flight each | payload=%dB (%s) | %s\n",
			c.PushBatch, c.Pacers, c.Payload, c.Encoding, dedup)
	}
	fmt.Fprintf(&b, "  consume: pop-batch=%d pop-partitions=%d lease=%s group=%s | conns=%d | duration=%s interval=%s drain<=%s | verify=%t\n",
		c.PopBatch, c.PopPartitions, c.Lease, c.Group, c.Conns, c.Duration, c.Interval, c.Drain, c.Verify)
	fmt.Fprintf(&b, "  against: %s\n", r.be.describe())
	if r.target == TargetComb {
		fmt.Fprintf(&b, "[configure] queue=%s completedRetentionSeconds=%d dedupWindowSeconds=%d\n",
			c.Queue, int64(c.CompletedRetention/time.Second), int64(c.DedupWindow/time.Second))
	}
	r.out.printf("%s", b.String())
}

// printInterval prints one interval line: what happened during it. A line
// spans -interval, or a little more; one that spans less, the last of a
// run, says its span.
func (r *runner) printInterval(row *intervalRow) {
	c := &row.Counts
	span := ""
	if row.Secs < r.cfg.Interval.Seconds() {
		span = fmt.Sprintf(" last %.1fs:", row.Secs)
	}
	line := fmt.Sprintf("[%6.0fs]%s offered %d pushed %d popped %d acked %d | failed push %d pop %d ack %d | shed %d | %s in %s out msg/s | e2e p50 %s p99 %s p99.9 %s | ack rtt %s\n",
		row.At, span, c.Offered, c.Pushed, c.Popped, c.Acked, c.PushFailed, c.PopFailed, c.AckFailed, c.Shed,
		rate(float64(c.Pushed)/row.Secs), rate(float64(c.Popped)/row.Secs),
		msStr(row.Latency.P50, row.Latency.Count), msStr(row.Latency.P99, row.Latency.Count), msStr(row.Latency.P999, row.Latency.Count),
		msStr(ms(c.ackRTT()), c.AckTimed))
	if c.PushFailed+c.PopFailed+c.AckFailed > 0 {
		for i, name := range []string{"push", "pop", "ack"} {
			if p := r.lastErr[i].Swap(nil); p != nil {
				line += fmt.Sprintf("           last %s error: %s\n", name, *p)
			}
		}
	}
	r.out.printf("%s", line)
}

// printFinal prints the aggregate line and, with -verify, the verdict.
func (r *runner) printFinal(res *Result) {
	c := &res.Counts
	var b strings.Builder
	state := "complete"
	if res.Interrupted {
		state = "interrupted"
	}
	// Duplicate answers need producer ids and, with ids unique to every
	// message, should not happen: shown only when they did.
	dups := ""
	if c.PushDuplicates > 0 {
		dups = fmt.Sprintf(" | duplicate answers %d", c.PushDuplicates)
	}
	fmt.Fprintf(&b, "[final %s] %s after %.1fs (+%.1fs drain): offered %d pushed %d popped %d acked %d | failed push %d (%d msgs) pop %d ack %d | shed %d%s | avg %s in %s out msg/s | e2e p50 %s p99 %s p99.9 %s max %s | ack rtt avg %s | push rtt avg %s\n",
		res.Label, state, res.Elapsed, res.Drained, c.Offered, c.Pushed, c.Popped, c.Acked,
		c.PushFailed, c.PushFailMsgs, c.PopFailed, c.AckFailed, c.Shed, dups,
		rate(res.PushRate), rate(res.PopRate),
		msStr(res.Latency.P50, res.Latency.Count), msStr(res.Latency.P99, res.Latency.Count),
		msStr(res.Latency.P999, res.Latency.Count), msStr(res.Latency.Max, res.Latency.Count),
		msStr(res.AckRTTMs, c.AckTimed), msStr(res.PushRTT, c.PushRequests))
	rs := &res.Resources
	fmt.Fprintf(&b, "[resources %s] broker rss median %s MB max %s MB | cpu broker %s loader %s postgres %s cores | commits %s/s | WAL %s MB/s %s syncs/s | db %s MB\n",
		res.Label, num(rs.BrokerRSSMB, 0), num(rs.BrokerRSSMaxMB, 0), num(rs.BrokerCPU, 2), num(rs.LoaderCPU, 2), num(rs.PGCPU, 2),
		num(rs.Commits, 0), num(rs.WALMBps, 2), num(rs.WALSyncs, 0), num(rs.DBSizeMB, 0))
	if v := &res.Verdict; v.Checked {
		verdict := "OK"
		if !v.OK() {
			verdict = "FAILED"
		}
		fmt.Fprintf(&b, "[verify %s] %s: sent %d stored %d delivered %d | missing %d | duplicates %d | order violations %d (skips %d, after-ack %d) | failed pushes %d msgs (%d delivered anyway) | unanswered %d unknown %d foreign %d\n",
			res.Label, verdict, v.Sent, v.Stored, v.Delivered, v.Missing, v.Duplicates, v.OrderViolations, v.Skips, v.AfterAck,
			v.FailedPush, v.FailedDelivered, v.Unanswered, v.Unknown, v.Foreign)
	} else if v.Foreign > 0 {
		fmt.Fprintf(&b, "[note %s] %d deliveries were not this run's messages (left in the queue earlier)\n", res.Label, v.Foreign)
	}
	r.out.printf("%s", b.String())
}

// writeComparison prints the runs side by side with their ratio to the
// first.
func writeComparison(p *printer, runs []Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "[compare] %-18s %12s %12s %10s %10s %10s %8s %9s %10s %8s\n",
		"run", "in msg/s", "out msg/s", "p50 ms", "p99 ms", "p99.9 ms", "shed", "verify", "rss MB", "ratio")
	base := runs[0].PopRate
	for _, r := range runs {
		verdict := "-"
		if r.Verdict.Checked {
			verdict = "ok"
			if !r.Verdict.OK() {
				verdict = "FAILED"
			}
		}
		ratio := math.NaN()
		if r.PopRate > 0 {
			ratio = base / r.PopRate
		}
		fmt.Fprintf(&b, "[compare] %-18s %12.0f %12.0f %10.2f %10.2f %10.2f %8d %9s %10s %8s\n",
			r.Label, r.PushRate, r.PopRate, r.Latency.P50, r.Latency.P99, r.Latency.P999,
			r.Counts.Shed, verdict, num(r.Resources.BrokerRSSMB, 0), num(jsonFloat(ratio), 2))
	}
	fmt.Fprintf(&b, "[compare] ratio = %s's out msg/s divided by the run's\n", runs[0].Label)
	p.printf("%s", b.String())
}

// rate formats a rate in messages per second.
func rate(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// msStr formats milliseconds, "-" when nothing was measured.
func msStr(v float64, n int64) string {
	if n == 0 {
		return "-"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}

func num(v jsonFloat, decimals int) string {
	if math.IsNaN(float64(v)) {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, float64(v))
}
