package loadtest_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/loadtest"
	"github.com/combmq/comb/protocol"
)

// TestSmokeVerify is CI's smoke run: about ten seconds of a light open-loop
// load on a real Comb (PostgreSQL, embedded NATS, the bridge) with
// per-message verification. It fails when a message is missing or out of
// order, or when the loader breaks; it asserts no throughput.
func TestSmokeVerify(t *testing.T) {
	t.Parallel()
	// The loader's lean client for the whole ten seconds, and clients/go
	// for a shorter run alongside, so that both stay honest.
	// Deduplication on, briefly and slowly, in both clients: every
	// message carries a producer id, none is a duplicate, verification
	// holds. Those runs carry 64 bytes of headers per message too.
	for _, tc := range []struct {
		name     string
		client   loadtest.Client
		duration time.Duration
		rate     int
		dedup    time.Duration
	}{
		{"raw", loadtest.ClientRaw, 10 * time.Second, 2000, 0},
		{"go", loadtest.ClientGo, 4 * time.Second, 2000, 0},
		{"raw-dedup-headers", loadtest.ClientRaw, 3 * time.Second, 500, 30 * time.Second},
		{"go-dedup-headers", loadtest.ClientGo, 3 * time.Second, 500, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			headers := 0
			if tc.dedup > 0 {
				headers = 64
			}
			smoke(t, tc.client, tc.duration, tc.rate, tc.dedup, headers)
		})
	}
}

// TestSmokeAckNext: with -ack-next every batch's acks ride on the
// consumer's next pop; every message is delivered and acked, no ack
// fails, and the last batches' acks, carried by long polls that the run's
// end finds waiting, are accounted too.
func TestSmokeAckNext(t *testing.T) {
	t.Parallel()
	r := smoke(t, loadtest.ClientRaw, 3*time.Second, 1000, 0, 0, func(c *loadtest.Config) { c.AckNext = true })
	require.Zero(t, r.Counts.AckFailed, "failed acks")
	require.Equal(t, r.Counts.Popped, r.Counts.Acked, "every message popped was acked")
}

// TestSmokePushLog: -push-log writes a row a push request, each with its
// messages delivered, its times in order, and its slowest delivery the
// run's slowest e2e latency, as the run's histogram counts it.
func TestSmokePushLog(t *testing.T) {
	t.Parallel()
	var dir string
	r := smoke(t, loadtest.ClientRaw, 3*time.Second, 500, 0, 0, func(c *loadtest.Config) {
		c.PushLog = true
		dir = c.OutDir
	})
	f, err := os.Open(filepath.Join(dir, "pushes.csv"))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"due_ms", "producer", "partition", "first_seq", "messages", "failed",
		"sent_ms", "answered_ms", "e2e_first_ms", "e2e_last_ms", "deliveries"}, rows[0])
	rows = rows[1:]
	require.Len(t, rows, int(r.Counts.PushRequests), "a row a push request")
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, s)
		return v
	}
	var slowest, lastDue float64
	var messages, deliveries int
	for _, row := range rows {
		due, sent, answered, first, last := num(row[0]), num(row[6]), num(row[7]), num(row[8]), num(row[9])
		require.GreaterOrEqual(t, due, lastDue, "rows in the order they were due")
		lastDue = due
		require.Equal(t, "false", row[5], "no push failed")
		require.GreaterOrEqual(t, sent, 0.0, "sent once due")
		require.Greater(t, answered, sent, "answered after it was sent")
		require.LessOrEqual(t, first, last)
		require.Greater(t, last, sent, "delivered after it was sent")
		messages += int(num(row[4]))
		deliveries += int(num(row[10]))
		slowest = max(slowest, last)
	}
	require.EqualValues(t, r.Counts.Pushed, messages)
	require.EqualValues(t, r.Latency.Count, deliveries, "every delivery of the run, counted once")
	// The histogram keeps microseconds to three significant digits and
	// reports the top of the bucket of its largest value.
	require.InDelta(t, slowest, r.Latency.Max, 0.002*slowest+0.002, "the slowest delivery is the run's max")
}

// TestSmokePipeline: with -pipeline every batch is settled by one
// transaction that acks it and pushes it to <queue>.out, in both clients;
// verification holds, and the output queue holds exactly what was acked,
// once: a transaction under an expired lease pushes nothing.
func TestSmokePipeline(t *testing.T) {
	t.Parallel()
	for _, client := range []loadtest.Client{loadtest.ClientRaw, loadtest.ClientGo} {
		t.Run(string(client), func(t *testing.T) {
			t.Parallel()
			env := combtest.Start(t)
			cfg := loadtest.DefaultConfig()
			cfg.NATSURL = env.URL
			cfg.PostgresURL = env.PostgresURL
			cfg.Queue = "pipe"
			cfg.Rate = 500
			cfg.PushBatch = 50
			cfg.Partitions = 4
			cfg.Consumers = 2
			cfg.Pacers = 2
			cfg.Client = client
			cfg.Pipeline = true
			cfg.Headers = 32
			cfg.Duration = 3 * time.Second
			cfg.Drain = 30 * time.Second
			cfg.Verify = true
			cfg.Report = false
			cfg.OutDir = t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var out bytes.Buffer
			sum, err := loadtest.Run(ctx, cfg, &out)
			t.Log("\n" + out.String())
			require.NoError(t, err)
			r := sum.Runs[0]
			require.Zero(t, r.Verdict.Missing)
			require.Zero(t, r.Verdict.OrderViolations)
			require.Positive(t, r.Counts.Acked)
			require.Contains(t, out.String(), "pipeline: each batch settled by one transaction")
			info, err := comb.New(env.NC).Info(ctx, loadtest.PipelineQueue(cfg.Queue))
			require.NoError(t, err)
			require.Equal(t, r.Counts.Acked, info.Messages, "the output holds each acked message once")
			require.Equal(t, int64(loadtest.PipelineMaxAgeS), info.Config.MaxAgeS)
		})
	}
}

func smoke(t *testing.T, client loadtest.Client, duration time.Duration, rate int, dedup time.Duration, headers int,
	edits ...func(*loadtest.Config)) loadtest.Result {
	env := combtest.Start(t)
	// A copy of every push request, to see the ids on the wire; it ends
	// with env's connection.
	pushes, err := env.NC.SubscribeSync(protocol.Subject(protocol.DefaultPrefix, protocol.VerbPush, "smoke"))
	require.NoError(t, err)

	cfg := loadtest.DefaultConfig()
	cfg.NATSURL = env.URL
	cfg.PostgresURL = env.PostgresURL
	cfg.Queue = "smoke"
	cfg.Rate = rate
	cfg.DedupWindow = dedup
	cfg.Headers = headers
	cfg.PushBatch = 50
	cfg.Partitions = 8
	cfg.Consumers = 4
	cfg.Pacers = 2
	cfg.Conns = 2
	cfg.Client = client
	cfg.Duration = duration
	cfg.Interval = 5 * time.Second
	cfg.Drain = 30 * time.Second
	cfg.Verify = true
	cfg.OutDir = t.TempDir()
	// One report is enough to keep it drawn; it costs seconds under -race.
	cfg.Report = client == loadtest.ClientRaw && dedup == 0 && len(edits) == 0
	for _, edit := range edits {
		edit(&cfg)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	sum, err := loadtest.Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.Len(t, sum.Runs, 1)
	r := sum.Runs[0]
	v := r.Verdict
	require.True(t, v.Checked)
	require.Zero(t, v.Missing, "missing messages")
	require.Zero(t, v.OrderViolations, "order violations")
	require.Zero(t, v.Unknown)
	require.Positive(t, v.Stored)
	require.Equal(t, r.Counts.Pushed, v.Stored)
	require.Equal(t, v.Stored+v.FailedDelivered, v.Delivered, "everything stored was delivered, nothing else of this run")
	require.Zero(t, v.Unanswered)
	require.Positive(t, r.Latency.Count)

	files := []string{"summary.json", "intervals.csv", "samples.csv"}
	if cfg.Report {
		files = append(files, "report.png")
	}
	for _, f := range files {
		_, err := os.Stat(filepath.Join(cfg.OutDir, f))
		require.NoError(t, err, f)
	}
	// Every interval row spans the time since the previous one, at least
	// the interval but the last, which may be shorter.
	ivs, err := os.ReadFile(filepath.Join(cfg.OutDir, "intervals.csv"))
	require.NoError(t, err)
	recs, err := csv.NewReader(bytes.NewReader(ivs)).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"elapsed_s", "seconds"}, recs[0][:2])
	require.Greater(t, len(recs), 1, "no interval row")
	prev := 0.0
	for i, rec := range recs[1:] {
		at, err := strconv.ParseFloat(rec[0], 64)
		require.NoError(t, err)
		secs, err := strconv.ParseFloat(rec[1], 64)
		require.NoError(t, err)
		require.InDelta(t, at-prev, secs, 0.002, "row %d: span and elapsed time disagree", i)
		if i < len(recs)-2 {
			require.GreaterOrEqual(t, secs, cfg.Interval.Seconds(), "row %d: an interval cut short", i)
		}
		prev = at
	}

	var back loadtest.Result
	b, err := os.ReadFile(filepath.Join(cfg.OutDir, "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r.Counts, back.Counts)
	require.Equal(t, dedup.Seconds(), back.Settings.DedupWindow)
	require.Equal(t, headers, back.Settings.Headers)
	require.Contains(t, out.String(), "[verify comb] OK")
	require.Contains(t, out.String(), fmt.Sprintf("dedupWindowSeconds=%d", int(dedup.Seconds())))
	require.Zero(t, r.Counts.PushDuplicates)
	require.NotContains(t, out.String(), "duplicate answers")

	// The first push request the loader sent: with deduplication on its
	// messages carry distinct ids, and the broker remembers them, so the
	// same request again stores nothing.
	first, err := pushes.NextMsg(5 * time.Second)
	require.NoError(t, err)
	msgs, err := wire.DecodePush(first.Data, wire.DefaultLimits())
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, m := range msgs {
		require.Len(t, m.Headers, headers, "headers of the size asked")
		if dedup == 0 {
			require.Empty(t, m.ID)
			continue
		}
		require.NotEmpty(t, m.ID)
		require.False(t, ids[m.ID], "id %s twice in one request", m.ID)
		ids[m.ID] = true
	}
	if dedup == 0 {
		return r
	}
	again, err := env.NC.Request(first.Subject, first.Data, 10*time.Second)
	require.NoError(t, err)
	var res protocol.PushReply
	require.NoError(t, json.Unmarshal(again.Data, &res), string(again.Data))
	require.Len(t, res.Results, len(msgs))
	for _, pr := range res.Results {
		require.Equal(t, protocol.StatusDuplicate, pr.Status)
	}
	return r
}
