package broker

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/web"
)

// Setting is one of Comb's settings. The one table of them, Settings,
// drives the flags of `comb serve`, their COMB_… environment twins, the
// keys of the configuration file's comb block, `comb serve -h` and the
// table in docs/configuration.md.
type Setting struct {
	// Key is the setting's key in the file's comb block, such as
	// push_workers. Flag and EnvVar derive the other two names from it.
	Key string
	// Group is the section the setting is listed under.
	Group string
	// Usage says what the setting means, in a line.
	Usage string
	// Default is the default as users see it: the value in DefaultConfig
	// or, for a NATS setting whose zero means "the file's, else Comb's",
	// Comb's default. "" means none (the setting is off or empty).
	Default string

	kind kind
	bind func(*Config) flag.Value
}

// kind is what a setting's value is, for reading it from the file.
type kind int

const (
	kindString kind = iota
	kindInt
	kindSize
	kindBool
	kindDuration
	kindList
)

// Flag returns the setting's flag name, without the dash: the key with
// dashes for underscores (push_workers is -push-workers).
func (s Setting) Flag() string { return flagName(s.Key) }

// EnvVar returns the setting's environment variable: COMB_ and the key in
// upper case (push_workers is COMB_PUSH_WORKERS).
func (s Setting) EnvVar() string { return "COMB_" + strings.ToUpper(s.Key) }

// Value returns the setting's field of c as a flag.Value: Set parses a
// flag's, variable's or file's text into c, String formats c's value.
func (s Setting) Value(c *Config) flag.Value { return s.bind(c) }

func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// Group names, in the order they are listed.
const (
	GroupGeneral    = "General"
	GroupPostgreSQL = "PostgreSQL and the store"
	GroupNATS       = "Embedded NATS server"
	GroupBridge     = "Bridge"
)

// Settings returns every setting, grouped, in the order they are listed.
func Settings() []Setting {
	out := slices.Clone(settings)
	def := DefaultConfig()
	for i := range out {
		if out[i].Default == "" {
			out[i].Default = out[i].Value(&def).String()
		}
	}
	return out
}

// Lookup returns the setting with the file key key.
func Lookup(key string) (Setting, bool) {
	for _, s := range Settings() {
		if s.Key == key {
			return s, true
		}
	}
	return Setting{}, false
}

var settings = []Setting{
	// General.
	{Key: "data_dir", Group: GroupGeneral, kind: kindString,
		Usage: "directory for Comb's local state and the private PostgreSQL cluster",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.DataDir) }},
	{Key: "log_level", Group: GroupGeneral, kind: kindString,
		Usage: "debug, info, warn or error",
		bind:  func(c *Config) flag.Value { return (*levelValue)(&c.LogLevel) }},
	{Key: "sweep_interval", Group: GroupGeneral, kind: kindDuration,
		Usage: "how often retention (completed_retention_s, max_age_s) and dedup expiry run",
		bind:  func(c *Config) flag.Value { return (*durationValue)(&c.SweepInterval) }},
	{Key: "http", Group: GroupGeneral, kind: kindString,
		Usage: "HTTP listener host:port for /healthz, /readyz, /metrics and the status page; loopback by default, port 0 picks a free one, empty is off (it has no authentication)",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.HTTP) }},
	{Key: "http_dlq_replay", Group: GroupGeneral, kind: kindBool,
		Usage: "let the status page on the HTTP listener replay dead letters (a POST; the listener has no authentication)",
		bind:  func(c *Config) flag.Value { return (*boolValue)(&c.HTTPDLQReplay) }},
	{Key: "http_sample_interval", Group: GroupGeneral, kind: kindDuration, Default: web.DefaultSampleInterval.String(),
		Usage: "how often the status page samples every queue's totals for its rate charts (one query per sample)",
		bind:  func(c *Config) flag.Value { return (*durationValue)(&c.HTTPSampleInterval) }},
	{Key: "metrics", Group: GroupGeneral, kind: kindBool,
		Usage: "serve Prometheus metrics at /metrics on the HTTP listener (docs/operations.md)",
		bind:  func(c *Config) flag.Value { return (*boolValue)(&c.Metrics) }},
	{Key: "metrics_max_queues", Group: GroupGeneral, kind: kindInt,
		Usage: "queues (and queue-group pairs) with metrics labels of their own; later ones are summed under queue=\"_other\"",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.MetricsMaxQueues} }},
	{Key: "pprof", Group: GroupGeneral, kind: kindString,
		Usage: "serve Go's pprof profiles on this loopback host:port (127.0.0.1, ::1 or localhost, e.g. 127.0.0.1:6060); empty is off",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.Pprof) }},

	{Key: "spool_dir", Group: GroupGeneral, kind: kindString, Default: "<data-dir>/spool",
		Usage: "directory of the spool that takes pushes while PostgreSQL is unreachable or in maintenance mode",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.SpoolDir) }},
	{Key: "spool_max_bytes", Group: GroupGeneral, kind: kindSize,
		Usage: "bound of the spool's files; past it pushes answer 503; 0 turns the spool off",
		bind:  func(c *Config) flag.Value { return &sizeValue[int64]{&c.SpoolMaxBytes} }},
	{Key: "gc_percent", Group: GroupGeneral, kind: kindInt,
		Usage: "the Go garbage collector's target (GOGC) for comb serve's process, unless GOGC is set: higher spends less CPU on collection and more memory",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.GCPercent} }},
	{Key: "memory_limit", Group: GroupGeneral, kind: kindSize,
		Usage: "the Go runtime's soft memory limit (GOMEMLIMIT) for comb serve's process, unless GOMEMLIMIT is set: near it the collector runs more often; 0 is none",
		bind:  func(c *Config) flag.Value { return &sizeValue[int64]{&c.MemoryLimit} }},
	{Key: "maintenance", Group: GroupGeneral, kind: kindBool,
		Usage: "start in maintenance mode: spool every push, answer 503 to every other verb, read nothing from PostgreSQL (the comb.maintenance verb turns it off)",
		bind:  func(c *Config) flag.Value { return (*boolValue)(&c.Bridge.Maintenance) }},

	// PostgreSQL.
	{Key: "postgres_url", Group: GroupPostgreSQL, kind: kindString,
		Usage: "PostgreSQL URL; empty runs a private cluster in <data-dir>/postgres",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.Postgres.URL) }},
	{Key: "pg_port", Group: GroupPostgreSQL, kind: kindInt,
		Usage: "loopback port of the private PostgreSQL cluster; 0 picks a free one",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Postgres.Port} }},
	{Key: "pg_max_conns", Group: GroupPostgreSQL, kind: kindInt,
		Usage: "connections in the store's pool (pops have a second pool of the same size)",
		bind:  func(c *Config) flag.Value { return &intValue[int32]{&c.Postgres.MaxConns} }},
	{Key: "pg_warm", Group: GroupPostgreSQL, kind: kindBool,
		Usage: "before serving, open the connections the workers use and prepare and plan the requests' statements on them; off: the first requests pay for that",
		bind:  func(c *Config) flag.Value { return (*boolValue)(&c.Postgres.Warm) }},
	{Key: "durable_pops", Group: GroupPostgreSQL, kind: kindBool,
		Usage: "make a pop's lease wait for the WAL flush like a push; off: a lease lost in a crash only redelivers",
		bind:  func(c *Config) flag.Value { return (*boolValue)(&c.Postgres.DurablePops) }},
	{Key: "durable_acks", Group: GroupPostgreSQL, kind: kindBool,
		Usage: "make an ack's commit wait for the WAL flush like a push; off: an ack lost in a crash only redelivers",
		bind:  func(c *Config) flag.Value { return (*boolValue)(&c.Postgres.DurableAcks) }},
	{Key: "queue_cache_ttl", Group: GroupPostgreSQL, kind: kindDuration,
		Usage: "how long a queue's settings and groups are cached; a configure on another broker shows within it, a seek there as soon as its wake-up arrives",
		bind:  func(c *Config) flag.Value { return (*durationValue)(&c.Postgres.QueueCacheTTL) }},
	{Key: "pg_start_wait", Group: GroupPostgreSQL, kind: kindDuration,
		Usage: "at start, how long to wait for a PostgreSQL that cannot be reached, trying again with backoff; 0 fails at once",
		bind:  func(c *Config) flag.Value { return (*durationValue)(&c.Postgres.StartWait) }},

	// NATS. Their zero values are "unset", so the file's server options
	// apply first; Default shows what applies when neither sets them.
	{Key: "nats_listen", Group: GroupNATS, kind: kindString,
		Default: net.JoinHostPort(embeddednats.DefaultHost, strconv.Itoa(embeddednats.DefaultPort)),
		Usage:   "NATS client listen address, host:port; port 0 picks a free one (overrides the file's listen, host, port)",
		bind: func(c *Config) flag.Value {
			return &listenValue{host: &c.NATS.Host, port: &c.NATS.Port}
		}},
	{Key: "nats_http", Group: GroupNATS, kind: kindInt, Default: strconv.Itoa(DefaultMonitorPort),
		Usage: "NATS monitoring port (/varz, /connz), on 127.0.0.1 unless the file's http names a host; 0 turns it off " +
			"(overrides the file's http, http_port, monitor_port; the default applies when the file has none)",
		bind: func(c *Config) flag.Value { return (*monitorValue)(&c.NATS.HTTPPort) }},
	{Key: "server_name", Group: GroupNATS, kind: kindString,
		Usage: "the NATS server's name in cluster and monitoring output; empty lets the server generate one (overrides the file's server_name)",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.NATS.ServerName) }},
	{Key: "max_payload", Group: GroupNATS, kind: kindSize, Default: formatSize(embeddednats.DefaultMaxPayload),
		Usage: "largest NATS message the server accepts (overrides the file's max_payload)",
		bind:  func(c *Config) flag.Value { return &sizeValue[int32]{&c.NATS.MaxPayload} }},
	{Key: "max_pending", Group: GroupNATS, kind: kindSize, Default: formatSize(embeddednats.DefaultMaxPending),
		Usage: "bytes that may queue for one slow client before the server cuts it off; at least max_payload (overrides the file's max_pending)",
		bind:  func(c *Config) flag.Value { return &sizeValue[int64]{&c.NATS.MaxPending} }},
	{Key: "lame_duck_duration", Group: GroupNATS, kind: kindDuration,
		Default: embeddednats.DefaultLameDuckDuration.String(),
		Usage:   "how long lame duck mode spreads client disconnects (overrides the file's lame_duck_duration)",
		bind:    func(c *Config) flag.Value { return (*durationValue)(&c.NATS.LameDuckDuration) }},
	{Key: "lame_duck_grace_period", Group: GroupNATS, kind: kindDuration,
		Default: embeddednats.DefaultLameDuckGracePeriod.String(),
		Usage:   "wait in lame duck mode before the first disconnect (overrides the file's lame_duck_grace_period)",
		bind:    func(c *Config) flag.Value { return (*durationValue)(&c.NATS.LameDuckGracePeriod) }},
	{Key: "cluster_name", Group: GroupNATS, kind: kindString,
		Usage: "NATS cluster name, the same on every broker of a cluster (overrides the file's cluster.name)",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.NATS.Cluster.Name) }},
	{Key: "cluster_listen", Group: GroupNATS, kind: kindString,
		Usage: "NATS route listener for a cluster of brokers, host:port; port 0 picks a free one; empty is none (overrides the file's cluster.listen)",
		bind: func(c *Config) flag.Value {
			return &listenValue{host: &c.NATS.Cluster.Host, port: &c.NATS.Cluster.Port}
		}},
	{Key: "trusted_users", Group: GroupNATS, kind: kindList,
		Usage: "users (names, or public keys of nkeys) exempt from the denials Comb adds to every other user once " +
			"authentication is on (see docs/security.md); comma-separated, or a list in the file",
		bind: func(c *Config) flag.Value { return (*listValue)(&c.NATS.Trusted) }},
	{Key: "routes", Group: GroupNATS, kind: kindList,
		Usage: "other brokers' NATS servers, comma-separated nats-route://host:port URLs (overrides the file's cluster.routes)",
		bind:  func(c *Config) flag.Value { return (*listValue)(&c.NATS.Cluster.Routes) }},

	// Bridge.
	{Key: "prefix", Group: GroupBridge, kind: kindString,
		Usage: "first token of every Comb subject",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.Bridge.Prefix) }},
	{Key: "queue_group", Group: GroupBridge, kind: kindString,
		Usage: "NATS queue group of every endpoint, shared by the brokers that serve the same queues",
		bind:  func(c *Config) flag.Value { return (*stringValue)(&c.Bridge.QueueGroup) }},
	{Key: "decode_workers", Group: GroupBridge, kind: kindInt, Default: "GOMAXPROCS",
		Usage: "workers that decode pushes, puts and acks off their endpoints' subscriptions, so that no one goroutine decodes them all; the default is one per core Go uses",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.DecodeWorkers} }},
	{Key: "push_workers", Group: GroupBridge, kind: kindInt,
		Usage: "workers that run push and put transactions; the pushes of one partition all go to the same worker",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.PushWorkers} }},
	{Key: "push_queue", Group: GroupBridge, kind: kindInt,
		Usage: "push and put requests that may wait for a worker before the bridge answers 429",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.PushQueue} }},
	{Key: "batch_messages", Group: GroupBridge, kind: kindInt,
		Usage: "most messages one push transaction coalesces",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.BatchMessages} }},
	{Key: "batch_bytes", Group: GroupBridge, kind: kindSize,
		Usage: "most bytes one push transaction coalesces",
		bind:  func(c *Config) flag.Value { return &sizeValue[int]{&c.Bridge.BatchBytes} }},
	{Key: "pending_bytes", Group: GroupBridge, kind: kindSize,
		Usage: "request bytes of pushes and puts taken but not yet answered; at least max_request_bytes",
		bind:  func(c *Config) flag.Value { return &sizeValue[int]{&c.Bridge.PendingBytes} }},
	{Key: "ack_workers", Group: GroupBridge, kind: kindInt,
		Usage: "workers that run ack transactions",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.AckWorkers} }},
	{Key: "ack_queue", Group: GroupBridge, kind: kindInt,
		Usage: "ack requests that may wait for a worker before the bridge answers 429",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.AckQueue} }},
	{Key: "batch_acks", Group: GroupBridge, kind: kindInt,
		Usage: "most acks one ack transaction coalesces",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.BatchAcks} }},
	{Key: "pop_workers", Group: GroupBridge, kind: kindInt,
		Usage: "concurrent store pops",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.PopWorkers} }},
	{Key: "max_pops", Group: GroupBridge, kind: kindInt,
		Usage: "pops the bridge holds at once: waiting for a worker, running or long-polling",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.MaxPops} }},
	{Key: "retry_interval", Group: GroupBridge, kind: kindDuration,
		Usage: "how often the bridge checks, in one statement for all its long-polling pops, for messages that became ready without a wake-up (a safety net)",
		bind:  func(c *Config) flag.Value { return (*durationValue)(&c.Bridge.RetryInterval) }},
	{Key: "admin_workers", Group: GroupBridge, kind: kindInt,
		Usage: "workers that run renew, configure, info, list, delete, seek, dlq and txn",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.AdminWorkers} }},
	{Key: "admin_queue", Group: GroupBridge, kind: kindInt,
		Usage: "admin requests that may wait for a worker before the bridge answers 429",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.AdminQueue} }},
	{Key: "max_message_bytes", Group: GroupBridge, kind: kindSize,
		Usage: "hard cap on one message; a queue's own max_message_bytes applies within it",
		bind:  func(c *Config) flag.Value { return &sizeValue[int]{&c.Bridge.MaxMessageBytes} }},
	{Key: "max_request_bytes", Group: GroupBridge, kind: kindSize,
		Usage: "hard cap on one request body",
		bind:  func(c *Config) flag.Value { return &sizeValue[int]{&c.Bridge.MaxRequestBytes} }},
	{Key: "sub_pending_msgs", Group: GroupBridge, kind: kindInt,
		Usage: "requests the NATS client buffers per endpoint before a handler takes them",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.SubPendingMsgs} }},
	{Key: "sub_pending_bytes", Group: GroupBridge, kind: kindSize,
		Usage: "request bytes the NATS client buffers per endpoint before a handler takes them",
		bind:  func(c *Config) flag.Value { return &sizeValue[int]{&c.Bridge.SubPendingBytes} }},
	{Key: "spool_drain_batch", Group: GroupBridge, kind: kindInt,
		Usage: "most messages one drain transaction stores from the spool",
		bind:  func(c *Config) flag.Value { return &intValue[int]{&c.Bridge.DrainBatchMessages} }},
	{Key: "request_timeout", Group: GroupBridge, kind: kindDuration,
		Usage: "bound on each store call",
		bind:  func(c *Config) flag.Value { return (*durationValue)(&c.Bridge.RequestTimeout) }},
	{Key: "stop_timeout", Group: GroupBridge, kind: kindDuration,
		Usage: "how long a drain waits for requests in flight before it cancels them",
		bind:  func(c *Config) flag.Value { return (*durationValue)(&c.Bridge.StopTimeout) }},
}

// The flag.Values of the settings. Each parses what a flag, a variable or
// the file gives it; String formats the value so that Set reads it back.

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string { return strconv.FormatBool(bool(*v)) }

// IsBoolFlag lets -durable-pops stand alone, as flag.Bool does.
func (v *boolValue) IsBoolFlag() bool { return true }

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 500ms, 2s or 1m: %q", s)
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

type integer interface{ ~int | ~int32 | ~int64 }

type intValue[T integer] struct{ p *T }

func (v *intValue[T]) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, bits[T]())
	if err != nil {
		return fmt.Errorf("want a whole number: %q", s)
	}
	*v.p = T(n)
	return nil
}
func (v *intValue[T]) String() string { return strconv.FormatInt(int64(*v.p), 10) }

func bits[T integer]() int {
	var z T
	switch any(z).(type) {
	case int32:
		return 32
	}
	return 64
}

// sizeValue is a byte count, written as a number or with nats-server's
// size suffixes: K, M, G are powers of 1000; KB, MB, GB (and KiB, MiB,
// GiB) powers of 1024, as in the configuration file.
type sizeValue[T integer] struct{ p *T }

func (v *sizeValue[T]) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if int64(T(n)) != n {
		return fmt.Errorf("%q is too large", s)
	}
	*v.p = T(n)
	return nil
}
func (v *sizeValue[T]) String() string { return formatSize(int64(*v.p)) }

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30},
	{"k", 1000}, {"m", 1000 * 1000}, {"g", 1000 * 1000 * 1000},
}

func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a size such as 65536, 64KB or 8MB: %q", s)
	}
	if n != 0 && (n*mult)/mult != n {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// formatSize writes whole KB, MB and GB (powers of 1024) with their
// suffix, anything else as a number.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

type levelValue slog.Level

func (v *levelValue) Set(s string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("want debug, info, warn or error: %q", s)
	}
	*v = levelValue(l)
	return nil
}
func (v *levelValue) String() string { return strings.ToLower(slog.Level(*v).String()) }

// listenValue is host:port into a host and a port field, where port 0 is
// embeddednats' "unset" and -1 its "random": so ":0" and "host:0" pick a
// free port, as the flags always have, and "" unsets both.
type listenValue struct {
	host *string
	port *int
}

func (v *listenValue) Set(s string) error {
	if s == "" {
		*v.host, *v.port = "", 0
		return nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("%q: bad port", s)
	}
	if host == "" {
		host = "0.0.0.0" // ":4222" means every interface, as for net.Listen
	}
	if port == 0 {
		port = -1
	}
	*v.host, *v.port = host, port
	return nil
}

func (v *listenValue) String() string {
	if v.host == nil || (*v.host == "" && *v.port == 0) {
		return ""
	}
	port := *v.port
	if port == -1 {
		port = 0
	}
	return net.JoinHostPort(*v.host, strconv.Itoa(port))
}

// monitorValue is the monitoring port, where 0 on a flag means off
// (embeddednats.NoMonitoring) and "" means unset.
type monitorValue int

func (v *monitorValue) Set(s string) error {
	if s == "" {
		*v = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n > 65535 {
		return fmt.Errorf("want a port, or 0 for off: %q", s)
	}
	if n == 0 {
		n = embeddednats.NoMonitoring
	}
	*v = monitorValue(n)
	return nil
}

func (v *monitorValue) String() string {
	switch int(*v) {
	case 0:
		return ""
	case embeddednats.NoMonitoring:
		return "0"
	}
	return strconv.Itoa(int(*v))
}

// listValue is a comma-separated list.
type listValue []string

func (v *listValue) Set(s string) error {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	*v = out
	return nil
}
func (v *listValue) String() string { return strings.Join(*v, ",") }

// SetList sets the list from the file's list, whose elements may hold
// commas (a certificate's subject, "CN=alice,O=acme").
func (v *listValue) SetList(elems []string) error { *v = slices.Clone(elems); return nil }

func sortErrors(errs []error) {
	slices.SortStableFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
}
