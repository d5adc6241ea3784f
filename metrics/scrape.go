package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/combmq/comb/domain"
)

// scrapeCollector reports, on each scrape, the figures read then: the
// store's groups and pools, and the bridge's stats.
type scrapeCollector struct{ m *Metrics }

var (
	gl = []string{"tenant", "queue", "group"}

	descDepth    = prometheus.NewDesc("comb_group_depth_messages", "Messages a consumer group has not completed (retained ones).", gl, nil)
	descLag      = prometheus.NewDesc("comb_group_lag_seconds", "Age of the oldest message a consumer group has not completed; 0 when it has none.", gl, nil)
	descActive   = prometheus.NewDesc("comb_leases_active", "Live leases of a consumer group (one per leased partition).", gl, nil)
	descExpired  = prometheus.NewDesc("comb_leases_expired", "Leases of a consumer group past their time that no pop or ack has ended yet.", gl, nil)
	descFigsUp   = prometheus.NewDesc("comb_store_figures_up", "1 when the last read of the groups' figures from PostgreSQL succeeded, else 0.", nil, nil)
	descFigsRows = prometheus.NewDesc("comb_store_figures_groups", "Groups in the last read of the groups' figures (it reads at most 10000).", nil, nil)

	pl               = []string{"pool"}
	descPoolAcquired = prometheus.NewDesc("comb_pg_pool_acquired_conns", "PostgreSQL connections in use.", pl, nil)
	descPoolIdle     = prometheus.NewDesc("comb_pg_pool_idle_conns", "PostgreSQL connections idle in the pool.", pl, nil)
	descPoolTotal    = prometheus.NewDesc("comb_pg_pool_total_conns", "PostgreSQL connections open (in use, idle and being opened).", pl, nil)
	descPoolMax      = prometheus.NewDesc("comb_pg_pool_max_conns", "The pool's most connections.", pl, nil)
	descPoolAcq      = prometheus.NewDesc("comb_pg_pool_acquires_total", "Connections acquired from the pool.", pl, nil)
	descPoolEmpty    = prometheus.NewDesc("comb_pg_pool_empty_acquires_total", "Acquires that found no idle connection and waited for one.", pl, nil)
	descPoolWait     = prometheus.NewDesc("comb_pg_pool_acquire_wait_seconds_total", "Time spent waiting for a connection by acquires that found none idle.", pl, nil)
	descPoolCanceled = prometheus.NewDesc("comb_pg_pool_canceled_acquires_total", "Acquires cancelled by their context while waiting.", pl, nil)

	descInFlight   = prometheus.NewDesc("comb_requests_in_flight", "Requests the bridge has taken and not yet answered.", nil, nil)
	descWaiting    = prometheus.NewDesc("comb_pops_waiting", "Pops long-polling on the bridge.", nil, nil)
	descGated      = prometheus.NewDesc("comb_pops_gated", "Pops waiting for other pops of their group to finish, at the pop gate that keeps a group's pops from coming back near empty (docs/operations.md).", nil, nil)
	descOverloaded = prometheus.NewDesc("comb_requests_overloaded_total", "Requests refused with 429 because one of the bridge's bounds was reached.", nil, nil)
	descErrors     = prometheus.NewDesc("comb_request_errors_total", "Error replies of every kind.", nil, nil)
	descPopCalls   = prometheus.NewDesc("comb_pop_store_calls_total", "Store calls of pops.", nil, nil)
	descPopScans   = prometheus.NewDesc("comb_pop_scans_total", "Store calls of pops that read every cursor of their group (the others find cursors by key).", nil, nil)
	descGatedTotal = prometheus.NewDesc("comb_pops_gated_total", "Pops that waited for other pops of their group to finish, at the pop gate (docs/operations.md).", nil, nil)
	descHandoffs   = prometheus.NewDesc("comb_pop_handoffs_total", "Long-polling pops answered by a push, which leased them what it stored in its own transaction (no pop statement).", nil, nil)
	descChecks     = prometheus.NewDesc("comb_pop_waiter_checks_total", "Safety checks of the long-polling pops: one statement each for all of them.", nil, nil)
	descDedupIDs   = prometheus.NewDesc("comb_dedup_ids", "Producer ids the bridge holds in memory for deduplication (about 64 bytes of heap each).", nil, nil)

	descSpoolBytes   = prometheus.NewDesc("comb_spool_bytes", "Bytes of the spool's files (pushes taken while PostgreSQL was away or in maintenance).", nil, nil)
	descSpoolRecords = prometheus.NewDesc("comb_spool_records", "Spooled push requests not yet drained into PostgreSQL.", nil, nil)
	descSpoolOldest  = prometheus.NewDesc("comb_spool_oldest_seconds", "Age of the oldest spooled record not yet drained; 0 when the spool is empty.", nil, nil)
	descSpoolDrained = prometheus.NewDesc("comb_spool_drained_messages_total", "Spooled messages the drain has stored in PostgreSQL.", nil, nil)
)

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDepth, descLag, descActive, descExpired, descFigsUp, descFigsRows,
		descPoolAcquired, descPoolIdle, descPoolTotal, descPoolMax, descPoolAcq, descPoolEmpty, descPoolWait, descPoolCanceled,
		descInFlight, descWaiting, descGated, descOverloaded, descErrors, descPopCalls, descPopScans, descGatedTotal, descHandoffs, descChecks, descDedupIDs,
		descSpoolBytes, descSpoolRecords, descSpoolOldest, descSpoolDrained} {
		ch <- d
	}
}

// groupAgg is one series of the group gauges: a group, or the sum of
// those past the cap.
type groupAgg struct {
	depth, active, expired int64
	lag                    float64
}

type groupLabels struct{ tenant, queue, group string }

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	if st := m.opts.Store; st != nil {
		rows, err := m.figs.get()
		up := 1.0
		if err != nil {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(descFigsUp, prometheus.GaugeValue, up)
		ch <- prometheus.MustNewConstMetric(descFigsRows, prometheus.GaugeValue, float64(len(rows)))
		aggs := map[groupLabels]*groupAgg{}
		var order []groupLabels
		m.mu.Lock()
		for _, r := range rows {
			q, g := m.groupLabelLocked(domain.QueueRef{Tenant: r.Tenant, Name: r.Queue}, r.Group)
			k := groupLabels{r.Tenant, q, g}
			a := aggs[k]
			if a == nil {
				a = &groupAgg{}
				aggs[k] = a
				order = append(order, k)
			}
			a.depth += r.Depth
			a.active += r.LeasesActive
			a.expired += r.LeasesExpired
			a.lag = max(a.lag, r.OldestAge.Seconds())
		}
		m.mu.Unlock()
		for _, k := range order {
			a := aggs[k]
			lv := []string{k.tenant, k.queue, k.group}
			ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(a.depth), lv...)
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, a.lag, lv...)
			ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(a.active), lv...)
			ch <- prometheus.MustNewConstMetric(descExpired, prometheus.GaugeValue, float64(a.expired), lv...)
		}
		for _, p := range st.PoolStats() {
			s := p.Stat
			ch <- prometheus.MustNewConstMetric(descPoolAcquired, prometheus.GaugeValue, float64(s.AcquiredConns()), p.Name)
			ch <- prometheus.MustNewConstMetric(descPoolIdle, prometheus.GaugeValue, float64(s.IdleConns()), p.Name)
			ch <- prometheus.MustNewConstMetric(descPoolTotal, prometheus.GaugeValue, float64(s.TotalConns()), p.Name)
			ch <- prometheus.MustNewConstMetric(descPoolMax, prometheus.GaugeValue, float64(s.MaxConns()), p.Name)
			ch <- prometheus.MustNewConstMetric(descPoolAcq, prometheus.CounterValue, float64(s.AcquireCount()), p.Name)
			ch <- prometheus.MustNewConstMetric(descPoolEmpty, prometheus.CounterValue, float64(s.EmptyAcquireCount()), p.Name)
			ch <- prometheus.MustNewConstMetric(descPoolWait, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds(), p.Name)
			ch <- prometheus.MustNewConstMetric(descPoolCanceled, prometheus.CounterValue, float64(s.CanceledAcquireCount()), p.Name)
		}
	}
	m.mu.RLock()
	stats, spoolStats := m.bridgeStats, m.spoolStats
	m.mu.RUnlock()
	if spoolStats != nil {
		if s, ok := spoolStats(); ok {
			oldest := 0.0
			if !s.Oldest.IsZero() {
				oldest = time.Since(s.Oldest).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(descSpoolBytes, prometheus.GaugeValue, float64(s.Bytes))
			ch <- prometheus.MustNewConstMetric(descSpoolRecords, prometheus.GaugeValue, float64(s.Records))
			ch <- prometheus.MustNewConstMetric(descSpoolOldest, prometheus.GaugeValue, oldest)
			ch <- prometheus.MustNewConstMetric(descSpoolDrained, prometheus.CounterValue, float64(s.Drained))
		}
	}
	if stats != nil {
		s := stats()
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight))
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(s.Waiting))
		ch <- prometheus.MustNewConstMetric(descGated, prometheus.GaugeValue, float64(s.Gated))
		ch <- prometheus.MustNewConstMetric(descOverloaded, prometheus.CounterValue, float64(s.Overloaded))
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(s.Errors))
		ch <- prometheus.MustNewConstMetric(descPopCalls, prometheus.CounterValue, float64(s.PopStoreCalls))
		ch <- prometheus.MustNewConstMetric(descPopScans, prometheus.CounterValue, float64(s.PopScans))
		ch <- prometheus.MustNewConstMetric(descHandoffs, prometheus.CounterValue, float64(s.PopHandoffs))
		ch <- prometheus.MustNewConstMetric(descGatedTotal, prometheus.CounterValue, float64(s.PopsGated))
		ch <- prometheus.MustNewConstMetric(descChecks, prometheus.CounterValue, float64(s.WaiterChecks))
		ch <- prometheus.MustNewConstMetric(descDedupIDs, prometheus.GaugeValue, float64(s.DedupIDs))
	}
}
