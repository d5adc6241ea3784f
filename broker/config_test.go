package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/bridge"

	"github.com/combmq/comb/embeddednats"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "comb.conf")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func TestDefaultConfigValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultConfig().Validate())
	// A Config built in code with zero fields means every default.
	require.NoError(t, Config{DataDir: "d", SweepInterval: time.Second}.Validate())
}

func TestValidateReportsEverything(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.DataDir = ""
	c.Postgres.URL = "postgres://h:notaport/db"
	c.Postgres.Port = 70000
	c.Postgres.MaxConns = -1
	c.SweepInterval = time.Nanosecond
	c.Pprof = "nope"
	c.NATS.Port = 65536
	c.NATS.HTTPPort = -3
	c.NATS.MaxPayload = -1
	c.NATS.Cluster.Port = -1 // a cluster without a name
	c.Bridge.Prefix = "a.b"
	c.Bridge.QueueGroup = "a..b"
	c.Bridge.PushWorkers = -1
	c.Bridge.PendingBytes = 1
	c.Bridge.StopTimeout = -time.Second
	c.GCPercent = 5
	c.MemoryLimit = 1 << 20
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{
		"-data-dir is empty", "-postgres-url", "-pg-port 70000", "-pg-max-conns -1", "-sweep-interval 1ns",
		`-pprof "nope"`, "-nats-listen 65536", "-nats-http -3", "-max-payload -1", "a cluster needs a name",
		`-prefix "a.b"`, `-queue-group "a..b"`, "-push-workers -1", "-pending-bytes 1: must be at least max_request_bytes",
		"-stop-timeout -1s", "-gc-percent 5", "-memory-limit 1048576: want at least 32MB",
	} {
		require.Contains(t, err.Error(), want)
	}
}

// TestPprofLoopbackOnly: pprof has no authentication, so Validate refuses
// an address the network can reach.
func TestPprofLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:6060", ":6060", "[::]:6060", "10.1.2.3:6060", "example.com:6060"} {
		c := DefaultConfig()
		c.Pprof = addr
		err := c.Validate()
		require.Error(t, err, addr)
		require.Contains(t, err.Error(), "-pprof", addr)
		require.Contains(t, err.Error(), "loopback only", addr)
	}
	for _, addr := range []string{"127.0.0.1:6060", "[::1]:6060", "localhost:0", "127.0.0.2:6060"} {
		c := DefaultConfig()
		c.Pprof = addr
		require.NoError(t, c.Validate(), addr)
	}
}

func TestSettingsTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, s := range Settings() {
		require.False(t, seen[s.Key], "duplicate key %s", s.Key)
		seen[s.Key] = true
		require.Regexp(t, `^[a-z][a-z0-9_]*$`, s.Key)
		require.NotEmpty(t, s.Usage, s.Key)
		require.NotEmpty(t, s.Group, s.Key)
		require.Equal(t, strings.ReplaceAll(s.Key, "_", "-"), s.Flag())
		require.Equal(t, "COMB_"+strings.ToUpper(s.Key), s.EnvVar())

		// A value's String reads back through Set to the same Config.
		c := DefaultConfig()
		v := s.Value(&c)
		text := v.String()
		c2 := DefaultConfig()
		require.NoError(t, s.Value(&c2).Set(text), "%s: %q", s.Key, text)
		require.Equal(t, c, c2, s.Key)
	}
	// Every existing serve flag is still there, under its old name.
	for _, k := range []string{"nats_listen", "nats_http", "postgres_url", "data_dir", "pg_port", "log_level",
		"prefix", "pprof", "sweep_interval"} {
		require.True(t, seen[k], k)
	}
}

// TestNATSDefaultsShown: what -h and the docs call the default of an
// "unset" NATS setting is what the server gets when nothing sets it.
func TestNATSDefaultsShown(t *testing.T) {
	t.Parallel()
	def := func(key string) string {
		s, ok := Lookup(key)
		require.True(t, ok, key)
		return s.Default
	}
	require.Equal(t, fmt.Sprintf("%s:%d", embeddednats.DefaultHost, embeddednats.DefaultPort), def("nats_listen"))
	require.Equal(t, "127.0.0.1:4222", def("nats_listen"))
	require.Equal(t, "8222", def("nats_http"))
	require.Equal(t, "8MB", def("max_payload"))
	require.Equal(t, "64MB", def("max_pending"))
	require.Equal(t, "10s", def("lame_duck_duration"))
	require.Equal(t, "2s", def("lame_duck_grace_period"))
	require.Equal(t, DefaultMonitorPort, DefaultConfig().natsConfig().HTTPPort)
}

func TestSizes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "65536": 65536, "64KB": 64 << 10, "8MB": 8 << 20, "8mib": 8 << 20,
		"1GB": 1 << 30, "8M": 8_000_000, "2k": 2000} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "x", "1.5MB", "MB", "99999999999GB"} {
		_, err := parseSize(in)
		require.Error(t, err, in)
	}
	require.Equal(t, "8MB", formatSize(8<<20))
	require.Equal(t, "1000", formatSize(1000))
	var small int32
	require.ErrorContains(t, (&sizeValue[int32]{&small}).Set("4GB"), "too large")
}

func TestMonitorDefault(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	require.Equal(t, DefaultMonitorPort, c.natsConfig().HTTPPort, "no file: today's 8222")
	c.NATS.Options = &server.Options{HTTPPort: 9000}
	require.Zero(t, c.natsConfig().HTTPPort, "the file's port stands")
	c.NATS.HTTPPort = embeddednats.NoMonitoring
	require.Equal(t, embeddednats.NoMonitoring, c.natsConfig().HTTPPort, "the flag wins")
}

// TestCombErrorFormat pins the one nats-server error LoadFile drops to
// the exact words nats-server writes, so an upgrade that changes them
// fails here rather than rejecting every file with a comb block.
func TestCombErrorFormat(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "port: 4222\n\n  comb {\n  prefix: shop\n}\n")
	err := (&server.Options{}).ProcessConfigFile(path)
	require.Error(t, err)
	var pe interface {
		Errors() []error
		Warnings() []error
	}
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Errors(), 1)
	m, err := conf.ParseFileWithChecks(path)
	require.NoError(t, err)
	tok := m["comb"].(confToken)
	require.Equal(t, 3, tok.Line())
	want := fmt.Sprintf("%s:%d:%d: unknown field %q", tok.SourceFile(), tok.Line(), tok.Position(), "comb")
	require.Equal(t, want, pe.Errors()[0].Error())
	require.Equal(t, path+":3:3: unknown field \"comb\"", want)
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
listen: 127.0.0.1:4333
authorization { user: alice, password: s3cret }
comb {
  prefix: shop
  push_workers: 7
  batch_bytes: 4MB
  durable_pops: true
  durable_acks: true
  sweep_interval: 250ms
  routes: [nats-route://a:6222, "nats-route://b:6222"]
  cluster_name: c
  log_level: debug
}
`)
	c := DefaultConfig()
	_, err := c.LoadFile(path)
	require.NoError(t, err)
	require.Equal(t, "shop", c.Bridge.Prefix)
	require.Equal(t, 7, c.Bridge.PushWorkers)
	require.Equal(t, 4<<20, c.Bridge.BatchBytes)
	require.True(t, c.Postgres.DurablePops)
	require.True(t, c.Postgres.DurableAcks)
	require.Equal(t, 250*time.Millisecond, c.SweepInterval)
	require.Equal(t, []string{"nats-route://a:6222", "nats-route://b:6222"}, c.NATS.Cluster.Routes)
	require.NotNil(t, c.NATS.Options)
	require.Equal(t, "alice", c.NATS.Options.Username)
	require.Equal(t, 4333, c.NATS.Options.Port)
	require.Zero(t, c.NATS.Port, "the file's listen is the server's, not a setting")
	require.NoError(t, c.Validate())

	// No comb block is fine too.
	c = DefaultConfig()
	_, err = c.LoadFile(writeFile(t, "port: 4333\n"))
	require.NoError(t, err)
	require.Equal(t, DefaultConfig().Bridge, c.Bridge)
}

func TestLoadTenantLimits(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
accounts { A: { users: [{user: a, password: a}] }, B: { users: [{user: b, password: b}] } }
comb {
  tenant_limits {
    default { max_queues: 100, max_bytes: 1GB, max_push_rate: 2500.5, max_push_bytes_rate: 10MB, max_waiting_pops: 500 }
    A { max_queues: 2 }
    "$G" { max_waiting_pops: 7 }
  }
}
`)
	c := DefaultConfig()
	_, err := c.LoadFile(path)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	q := c.Bridge.Quotas
	require.Equal(t, bridge.Quota{MaxQueues: 100, MaxBytes: 1 << 30, PushRate: 2500.5, PushBytesRate: 10 << 20, MaxWaitingPops: 500}, q.Of("B"))
	require.Equal(t, bridge.Quota{MaxQueues: 2}, q.Of("A"), "a tenant's block replaces the default whole")
	require.Equal(t, bridge.Quota{MaxWaitingPops: 7}, q.Of(""), "$G is the global tenant")
}

func TestLoadFileErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		body string
		want []string
	}{
		"unknown comb key": {"comb {\n  prefix: shop\n  push_wrokers: 4\n}\n", []string{`:3:3: comb: unknown setting "push_wrokers"`}},
		"unknown nats key": {"bogus_key: 1\ncomb { prefix: shop }\n", []string{`:1:0: unknown field "bogus_key"`}},
		"int as string":    {"comb {\n push_workers: many\n}\n", []string{":2:2: comb.push_workers:", `"many"`}},
		"bool for int":     {"comb {\n push_workers: true\n}\n", []string{":2:2: comb.push_workers: true is a boolean"}},
		"number duration":  {"comb {\n sweep_interval: 5\n}\n", []string{`comb.sweep_interval: 5 is a number; want a duration string such as "1s"`}},
		"number string":    {"comb {\n prefix: 5\n}\n", []string{"comb.prefix: 5 is a number"}},
		"not a block":      {"comb: 5\n", []string{"comb: want a block"}},
		"every error":      {"comb {\n a: 1\n b: 2\n}\n", []string{`unknown setting "a"`, `unknown setting "b"`}},
		"bad syntax":       {"comb {\n", []string{"config file"}},
		"unknown limit":    {"comb {\n tenant_limits { default { max_qeues: 1 } }\n}\n", []string{`unknown limit "max_qeues"`}},
		"negative limit":   {"comb {\n tenant_limits { A { max_bytes: -1 } }\n}\n", []string{"tenant_limits.A.max_bytes: -1: must be 0 (no limit) or more"}},
		"limit not number": {"comb {\n tenant_limits { A { max_push_rate: fast } }\n}\n", []string{"max_push_rate: fast is not a number"}},
		"limits not block": {"comb {\n tenant_limits: 5\n}\n", []string{"tenant_limits: want a block"}},
		"bad auth": {"authorization { user: a, password: b, users: [{user: c, password: d}] }\n",
			[]string{"Can not have a single user/pass and a users array"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tc.body)
			c := DefaultConfig()
			_, err := c.LoadFile(path)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}
