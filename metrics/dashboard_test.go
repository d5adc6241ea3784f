package metrics_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/broker"
	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/combtest"
)

// dashboard is the part of Grafana's dashboard schema the test reads.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos *struct {
			H, W, X, Y int
		} `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricName = regexp.MustCompile(`\b(?:comb|go|process)_[a-z_]+\b`)

// familyOf maps a series name a query uses to its family: a histogram's
// _bucket, _sum and _count are its own.
func familyOf(s scrape, name string) (string, bool) {
	if _, ok := s[name]; ok {
		return name, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f := s[base]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
				return base, true
			}
		}
	}
	return "", false
}

// busyScrape scrapes a broker after a push, a pop and an ack of each kind,
// so that every family has a series.
func busyScrape(t *testing.T) scrape {
	t.Helper()
	dir := t.TempDir()
	env := combtest.StartWith(t, combtest.Options{HTTP: "127.0.0.1:0", Tune: func(c *broker.Config) {
		c.SpoolDir, c.SpoolMaxBytes = dir, 1<<20 // the spool's metrics too
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := comb.New(env.NC)
	_, err := c.Push(ctx, "d", []comb.Message{{Data: []byte(`1`)}, {Data: []byte(`2`)}})
	require.NoError(t, err)
	d, err := c.Pop(ctx, "d", comb.PopOptions{Group: "g", Max: 1})
	require.NoError(t, err)
	_, err = c.Ack(ctx, "d", "g", []comb.Ack{{Partition: d[0].Partition, Offset: d[0].Offset, Lease: d[0].Lease}})
	require.NoError(t, err)
	return scrapeUntil(t, env, func(s scrape) bool { return s.value("comb_group_depth_messages", nil) >= 0 })
}

// TestDashboardUsesExistingMetrics parses docs/grafana/comb.json and checks
// its panels and that every metric its queries name exists.
func TestDashboardUsesExistingMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/grafana/comb.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID)
	require.Positive(t, d.SchemaVersion)
	require.NotEmpty(t, d.Panels)

	s := busyScrape(t)
	var exprs []string
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			exprs = append(exprs, v.Definition)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Title)
		require.Equal(t, "timeseries", p.Type, p.Title)
		require.NotNil(t, p.GridPos, p.Title)
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.RefID, p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names := metricName.FindAllString(e, -1)
		require.NotEmpty(t, names, "query %q names no metric", e)
		for _, n := range names {
			f, ok := familyOf(s, n)
			require.True(t, ok, "query %q: metric %s is not in the registry", e, n)
			used[f] = true
		}
	}
	// Every Comb metric has a panel.
	for name := range s {
		if strings.HasPrefix(name, "comb_") && name != "comb_store_figures_groups" && name != "comb_pg_pool_acquires_total" &&
			name != "comb_pg_pool_empty_acquires_total" {
			require.True(t, used[name], "no panel shows %s", name)
		}
	}
}

// TestOperationsDocListsEveryMetric holds docs/operations.md's table to
// the registry: every comb_ family has a row, every row a family.
func TestOperationsDocListsEveryMetric(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `(comb_[a-z_]+)` \\| (counter|gauge|histogram) \\|")
	doc := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		doc[m[1]] = m[2]
	}
	s := busyScrape(t)
	for name, f := range s {
		if !strings.HasPrefix(name, "comb_") {
			continue
		}
		typ, ok := doc[name]
		require.True(t, ok, "docs/operations.md has no row for %s", name)
		require.Equal(t, strings.ToLower(f.GetType().String()), typ, "type of %s", name)
		delete(doc, name)
	}
	require.Empty(t, doc, "docs/operations.md lists metrics the registry does not have")
}
