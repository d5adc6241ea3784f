package broker

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"
)

const configDoc = "../docs/configuration.md"

// docRow is the table row of docs/configuration.md that a setting must
// have, meaning aside: key, flag, environment variable and default.
func docRow(s Setting) []string {
	def := "—"
	if s.Default != "" {
		def = "`" + s.Default + "`"
	}
	return []string{"`" + s.Key + "`", "`-" + s.Flag() + "`", "`" + s.EnvVar() + "`", def}
}

// TestConfigDocTable fails when docs/configuration.md misses a setting,
// lists one that does not exist, or shows another default than the code.
func TestConfigDocTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(configDoc)
	require.NoError(t, err)
	rows := map[string][]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		var cells []string
		for c := range strings.SplitSeq(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		require.Len(t, cells, 5, "row %q: key, flag, environment, default, meaning", line)
		require.NotContains(t, rows, cells[0], "%s twice", cells[0])
		require.NotEmpty(t, cells[4], "%s has no meaning", cells[0])
		rows[cells[0]] = cells[:4]
	}
	for _, s := range Settings() {
		want := docRow(s)
		got, ok := rows[want[0]]
		require.True(t, ok, "%s: setting %s is missing; its row begins:\n| %s |", configDoc, s.Key, strings.Join(want, " | "))
		require.Equal(t, want, got, "%s: row of %s", configDoc, s.Key)
		delete(rows, want[0])
	}
	require.Empty(t, rows, "%s lists settings the code does not have", configDoc)
}

// TestConfigDocExample parses the complete example of
// docs/configuration.md through the real loader.
func TestConfigDocExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(configDoc)
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)### A complete example\n\n```conf\n(.*?)```").FindSubmatch(b)
	require.NotNil(t, m, "the example block")
	path := filepath.Join(t.TempDir(), "comb.conf")
	require.NoError(t, os.WriteFile(path, m[1], 0o600))

	c := DefaultConfig()
	_, err = c.LoadFile(path)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	o := c.NATS.Options
	require.Equal(t, "0.0.0.0", o.Host)
	require.Equal(t, 8222, o.HTTPPort)
	require.Len(t, o.Users, 2)
	require.Equal(t, "comb", o.Cluster.Name)
	require.Len(t, o.Routes, 1)
	require.Equal(t, "/var/lib/comb", c.DataDir)
	require.Equal(t, int32(32), c.Postgres.MaxConns)
	require.Contains(t, c.Postgres.URL, "@db:5432/comb")
	require.Equal(t, int64(1000), c.Bridge.Quotas.Of("A").MaxQueues)
	require.Equal(t, bridge.Quota{MaxWaitingPops: 500}, c.Bridge.Quotas.Of(""))
}
