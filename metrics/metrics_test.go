package metrics_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/pgtest"
	"github.com/combmq/comb/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

// scrape is one parsed scrape of /metrics.
type scrape map[string]*dto.MetricFamily

func scrapeOf(t *testing.T, env *combtest.Env) scrape {
	t.Helper()
	resp, err := http.Get(env.Broker.HTTPURL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// scrapeUntil scrapes until ok holds of a scrape, for the store's figures,
// which a scrape reads at most once a second, and returns the last.
func scrapeUntil(t *testing.T, env *combtest.Env, ok func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := scrapeOf(t, env)
		if ok(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// value is the value of the series of name whose labels include want, or
// -1 when there is none.
func (s scrape) value(name string, want map[string]string) float64 {
	f := s[name]
	if f == nil {
		return -1
	}
	for _, m := range f.GetMetric() {
		if !matches(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return -1
}

// histogram returns the series of a histogram whose labels include want.
func (s scrape) histogram(name string, want map[string]string) *dto.Histogram {
	for _, m := range s[name].GetMetric() {
		if matches(m, want) {
			return m.GetHistogram()
		}
	}
	return nil
}

func matches(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// labelValues lists the values label takes in a family.
func (s scrape) labelValues(name, label string) []string {
	var out []string
	for _, m := range s[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

func TestMetricsMoveWithTraffic(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{HTTP: "127.0.0.1:0"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := comb.New(env.NC)
	q := map[string]string{"tenant": "", "queue": "m"}
	g := map[string]string{"tenant": "", "queue": "m", "group": "g"}

	before := scrapeOf(t, env)
	require.Contains(t, before, "go_goroutines", "the Go runtime's collector")
	require.Contains(t, before, "process_cpu_seconds_total", "the process collector")
	require.Greater(t, before.value("comb_pg_pool_total_conns", map[string]string{"pool": "main"}), 0.0)
	require.Equal(t, -1.0, before.value("comb_pushed_messages_total", q), "no series before the queue is seen")

	msgs := make([]comb.Message, 10)
	for i := range msgs {
		msgs[i] = comb.Message{Data: []byte(`"abc"`)} // 5 bytes each
	}
	_, err := c.Push(ctx, "m", msgs)
	require.NoError(t, err)

	// Pop 4, ack the 4th: a cumulative ack completes all four.
	d, err := c.Pop(ctx, "m", comb.PopOptions{Group: "g", Max: 4})
	require.NoError(t, err)
	require.Len(t, d, 4)
	s := scrapeUntil(t, env, func(s scrape) bool { return s.value("comb_group_depth_messages", g) == 10 })
	require.Equal(t, 10.0, s.value("comb_pushed_messages_total", q))
	require.Equal(t, 50.0, s.value("comb_pushed_bytes_total", q))
	require.Equal(t, 4.0, s.value("comb_popped_messages_total", q))
	require.Equal(t, 20.0, s.value("comb_popped_bytes_total", q))
	require.Equal(t, 10.0, s.value("comb_group_depth_messages", g))
	require.Equal(t, 1.0, s.value("comb_leases_active", g))
	require.Greater(t, s.value("comb_group_lag_seconds", g), 0.0)
	ar, err := c.Ack(ctx, "m", "g", []comb.Ack{{Partition: d[3].Partition, Offset: d[3].Offset, Lease: d[3].Lease}})
	require.NoError(t, err)
	require.True(t, ar[0].OK)

	// Pop 2 (offsets 4 and 5) and retry the first: both come back.
	d, err = c.Pop(ctx, "m", comb.PopOptions{Group: "g", Max: 2})
	require.NoError(t, err)
	require.Len(t, d, 2)
	ar, err = c.Ack(ctx, "m", "g", []comb.Ack{{Partition: d[0].Partition, Offset: d[0].Offset, Lease: d[0].Lease, Status: comb.AckRetry}})
	require.NoError(t, err)
	require.True(t, ar[0].OK)

	// Offset 4 again (a retry spends no attempt): dead-letter it.
	d, err = c.Pop(ctx, "m", comb.PopOptions{Group: "g", Max: 1})
	require.NoError(t, err)
	require.Len(t, d, 1)
	require.Equal(t, int64(4), d[0].Offset)
	require.Equal(t, 1, d[0].Attempt)
	ar, err = c.Ack(ctx, "m", "g", []comb.Ack{{Partition: d[0].Partition, Offset: d[0].Offset, Lease: d[0].Lease, Status: comb.AckDead}})
	require.NoError(t, err)
	require.True(t, ar[0].OK)

	// Offset 5, under a short lease left to expire.
	d, err = c.Pop(ctx, "m", comb.PopOptions{Group: "g", Max: 1, Lease: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, d, 1)
	expired := d[0]

	s = scrapeUntil(t, env, func(s scrape) bool { return s.value("comb_leases_expired", g) == 1 })
	require.Equal(t, 1.0, s.value("comb_leases_expired", g), "the lease of offset 5 expired")
	require.Equal(t, 0.0, s.value("comb_leases_active", g))
	ar, err = c.Ack(ctx, "m", "g", []comb.Ack{{Partition: expired.Partition, Offset: expired.Offset, Lease: expired.Lease}})
	require.NoError(t, err)
	require.False(t, ar[0].OK, "an expired lease's ack settles nothing")

	// Offset 5 is delivered again, spending a second attempt; complete it.
	d, err = c.Pop(ctx, "m", comb.PopOptions{Group: "g", Max: 1})
	require.NoError(t, err)
	require.Len(t, d, 1)
	require.Equal(t, expired.Offset, d[0].Offset)
	require.Equal(t, 2, d[0].Attempt)
	ar, err = c.Ack(ctx, "m", "g", []comb.Ack{{Partition: d[0].Partition, Offset: d[0].Offset, Lease: d[0].Lease}})
	require.NoError(t, err)
	require.True(t, ar[0].OK)

	s = scrapeUntil(t, env, func(s scrape) bool { return s.value("comb_group_depth_messages", g) == 4 })
	require.Equal(t, 10.0, s.value("comb_pushed_messages_total", q))
	require.Equal(t, 9.0, s.value("comb_popped_messages_total", q), "4 + 2 + 1 + 1 + 1")
	require.Equal(t, 1.0, s.value("comb_redelivered_messages_total", q), "offset 5, after its lease expired")
	require.Equal(t, 5.0, s.value("comb_acked_messages_total", q), "offsets 0 to 3, and 5")
	require.Equal(t, 2.0, s.value("comb_retried_messages_total", q))
	require.Equal(t, 1.0, s.value("comb_dead_lettered_messages_total", q))
	require.Equal(t, 5.0, s.value("comb_dead_lettered_bytes_total", q))
	require.Equal(t, 1.0, s.value("comb_acks_refused_total", q))
	require.Equal(t, 4.0, s.value("comb_group_depth_messages", g), "offsets 6 to 9 are not completed")
	require.Equal(t, 0.0, s.value("comb_leases_expired", g))

	push := s.histogram("comb_transaction_messages", map[string]string{"op": "push"})
	require.NotNil(t, push)
	require.Equal(t, uint64(1), push.GetSampleCount())
	require.Equal(t, 10.0, push.GetSampleSum())
	require.Equal(t, 1.0, s.value("comb_commit_duration_seconds", map[string]string{"op": "push"}))
	require.Equal(t, 5.0, s.value("comb_commit_duration_seconds", map[string]string{"op": "ack"}))
	require.Equal(t, 5.0, s.value("comb_commit_duration_seconds", map[string]string{"op": "pop"}))
	require.Equal(t, 1.0, s.value("comb_request_duration_seconds", map[string]string{"tenant": "", "verb": "push"}))
	require.Equal(t, 5.0, s.value("comb_request_duration_seconds", map[string]string{"tenant": "", "verb": "pop"}))
	require.Equal(t, 1.0, s.value("comb_store_figures_up", nil))
	require.Equal(t, 0.0, s.value("comb_requests_in_flight", nil))
	require.Positive(t, s.value("comb_pop_store_calls_total", nil), "the pops above")
	require.LessOrEqual(t, s.value("comb_pop_scans_total", nil), s.value("comb_pop_store_calls_total", nil))
	require.Zero(t, s.value("comb_pop_handoffs_total", nil), "no pop waited for a push")
	require.Equal(t, 0.0, s.value("comb_dedup_ids", nil), "no queue has a dedup window")

	// Ids pushed to a queue with a window are held, one each, duplicates
	// not again.
	_, err = c.Configure(ctx, "dd", comb.ConfigPatch{DedupWindowS: comb.Int64(60)})
	require.NoError(t, err)
	_, err = c.Push(ctx, "dd", []comb.Message{{ID: "a", Data: []byte(`1`)}, {ID: "b", Data: []byte(`2`)}, {ID: "a", Data: []byte(`3`)}})
	require.NoError(t, err)
	scrapeUntil(t, env, func(s scrape) bool { return s.value("comb_dedup_ids", nil) == 2 })
}

func TestMetricsCapQueues(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{HTTP: "127.0.0.1:0", MetricsMaxQueues: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := comb.New(env.NC)
	for _, name := range []string{"q1", "q2", "q3", "q4"} {
		_, err := c.Push(ctx, name, []comb.Message{{Data: []byte(`1`)}})
		require.NoError(t, err)
		_, err = c.Pop(ctx, name, comb.PopOptions{Group: "g"})
		require.NoError(t, err)
	}
	s := scrapeUntil(t, env, func(s scrape) bool { return len(s.labelValues("comb_group_depth_messages", "queue")) == 3 })
	require.ElementsMatch(t, []string{"q1", "q2", "_other"}, s.labelValues("comb_pushed_messages_total", "queue"))
	require.Equal(t, 2.0, s.value("comb_pushed_messages_total", map[string]string{"queue": "_other"}), "q3 and q4")
	require.ElementsMatch(t, []string{"q1", "q2", "_other"}, s.labelValues("comb_group_depth_messages", "queue"))
	require.Equal(t, 2.0, s.value("comb_group_depth_messages", map[string]string{"queue": "_other", "group": "_other"}))
	require.Equal(t, 2.0, s.value("comb_leases_active", map[string]string{"queue": "_other", "group": "_other"}))
}

// TestMicroStatsReportRequestTime: micro's own processing time ends when a
// handler hands the request to a worker; the endpoint's data carries the
// time to the reply, which holds the store call.
func TestMicroStatsReportRequestTime(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{HTTP: "127.0.0.1:0"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := comb.New(env.NC).Put(ctx, "timed", []byte(`"x"`), comb.PutOptions{})
	require.NoError(t, err)

	commit := scrapeOf(t, env).histogram("comb_commit_duration_seconds", map[string]string{"op": "push"})
	require.Equal(t, uint64(1), commit.GetSampleCount())
	storeCall := time.Duration(commit.GetSampleSum() * float64(time.Second))

	out, err := exec.CommandContext(ctx, testenv.NATSCLI(t), "--server", env.URL, "--timeout", "5s",
		"micro", "stats", "comb", "--json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var stats []micro.Stats
	require.NoError(t, json.Unmarshal(out, &stats), "%s", out)
	require.Len(t, stats, 1)
	var put *micro.EndpointStats
	for _, e := range stats[0].Endpoints {
		if e.Name == "put" {
			put = e
		}
	}
	require.NotNil(t, put)
	require.Equal(t, 1, put.NumRequests)
	var data struct {
		Answered           int64         `json:"answered"`
		AverageRequestTime time.Duration `json:"average_request_time"`
	}
	require.NoError(t, json.Unmarshal(put.Data, &data))
	require.Equal(t, int64(1), data.Answered)
	require.Greater(t, data.AverageRequestTime, storeCall, "the request time holds the store call")
	require.Greater(t, data.AverageRequestTime, put.AverageProcessingTime, "micro's figure is the hand-off only")
	t.Logf("put: store call %s, request %s, micro's processing time %s", storeCall, data.AverageRequestTime, put.AverageProcessingTime)
}
