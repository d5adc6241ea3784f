package loadtest

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/combmq/comb/protocol"
)

// Mode is how the producers pace themselves.
type Mode string

// Modes.
const (
	// ModeOpenLoop sends push requests on a fixed schedule, whatever the
	// broker does: a request due while MaxInflight requests are unanswered
	// is shed (counted, never sent), and latency counts from the scheduled
	// send time, so a stalled broker cannot hide behind the loader waiting
	// for it (coordinated omission).
	ModeOpenLoop Mode = "openloop"
	// ModeClosed sends as fast as the system answers: each pacer sends its
	// next request when the previous one is answered. Latency counts from
	// the actual send time; Rate and MaxInflight are ignored.
	ModeClosed Mode = "closed"
)

// Target is the system the workload runs against.
type Target string

// Targets.
const (
	// TargetComb is a running Comb broker reached at Config.NATSURL.
	TargetComb Target = "comb"
	// TargetJetStream is an embedded nats-server with JetStream that the
	// loader starts itself: a work-queue stream on a file store, pull
	// consumers, explicit acks.
	TargetJetStream Target = "jetstream"
)

// JetStreamSync is the file store's sync policy for TargetJetStream.
type JetStreamSync string

// JetStream sync policies.
const (
	// SyncDefault is nats-server's default: fsync every two minutes.
	SyncDefault JetStreamSync = "default"
	// SyncAlways is sync_interval: always, an fsync per write, which is
	// what Comb's synchronous_commit on promises.
	SyncAlways JetStreamSync = "always"
)

// Client is how the loader speaks to Comb.
type Client string

// Clients.
const (
	// ClientRaw is the loader's own request encoder for the wire
	// protocol (rawwire.go): the same requests as clients/go for a fraction
	// of the CPU, which a loader sharing the machine with the broker needs.
	ClientRaw Client = "raw"
	// ClientGo is clients/go, what a Go application would use.
	ClientGo Client = "go"
)

// Config is one load test. Build it with DefaultConfig and change fields;
// Run validates it.
type Config struct {
	// Mode is ModeOpenLoop or ModeClosed.
	Mode Mode
	// Targets are run one after the other with the same workload; with more
	// than one, Run ends with a side-by-side table and ratios to the first.
	Targets []Target
	// JetStreamSyncs lists the sync policies TargetJetStream runs with,
	// one run each.
	JetStreamSyncs []JetStreamSync

	// Queue is the queue (Comb) or subject prefix (JetStream) to load.
	Queue string
	// Partitions is how many partitions the producers spread over; a push
	// request goes to one partition, round robin.
	Partitions int
	// Consumers is the number of closed-loop pop loops, all in one group.
	Consumers int
	// Group is the consumer group of the pop loops.
	Group string
	// ManualAck leases messages and acks them; false pops with auto_ack.
	ManualAck bool
	// Pipeline settles each popped batch with one transaction (comb.txn)
	// instead of an ack: it acks the batch and pushes its messages, same
	// partitions and bytes, to the queue PipelineQueue(Queue), as a
	// consume-transform-produce stage does. That queue is configured with
	// max_age_s PipelineMaxAgeS and nobody consumes it. Comb only, with
	// ManualAck.
	Pipeline bool
	// AckNext carries each batch's acks on the consumer's next pop (the
	// pop's acks field) instead of an ack request of their own: one
	// request a batch instead of two. Comb only, with ManualAck and the
	// raw client; AckAsync does not apply.
	AckNext bool
	// AckAsync sends each batch's ack from its own goroutine, so a consumer
	// pops again without waiting for the ack's round trip.
	AckAsync bool
	// AckInflight caps the asynchronous acks unanswered, over all
	// consumers; when it is reached consumers wait (an ack is never shed).
	AckInflight int

	// Rate is the offered load in messages per second (open loop).
	Rate int
	// PushBatch is the number of messages per push request.
	PushBatch int
	// Pacers is the number of producer goroutines that share the schedule
	// (open loop) or that each keep one push in flight (closed loop).
	Pacers int
	// MaxInflight caps the push requests sent and unanswered (open loop);
	// a request due beyond it is shed.
	MaxInflight int
	// Payload is the size of every message in bytes.
	Payload int
	// Encoding lays out the message header; see EncodingJSON.
	Encoding Encoding
	// Headers, when above zero, gives every message one header, X-Load,
	// whose stored form ({"X-Load":["hhh…"]}) is Headers bytes; JetStream
	// gets the same header on every publish. Zero sends none.
	Headers int
	// PopBatch is the most messages one pop returns.
	PopBatch int
	// PopPartitions is the most partitions one pop leases.
	PopPartitions int
	// PopWait is a pop's long-poll time when nothing is ready.
	PopWait time.Duration
	// Lease is the lease time of a pop (JetStream: the consumer's AckWait).
	Lease time.Duration
	// Conns is the number of NATS connections the loader spreads its
	// requests over.
	Conns int
	// Client is how the loader speaks to Comb: ClientRaw or ClientGo.
	Client Client

	// Duration is how long the producers run.
	Duration time.Duration
	// Interval is the period of the interval lines, a whole number of
	// seconds.
	Interval time.Duration
	// Drain bounds the wait, after the producers stop, for the consumers to
	// take what was pushed.
	Drain time.Duration
	// CompletedRetention is configured on the queue: completed messages
	// are deleted after this long (0 keeps them).
	CompletedRetention time.Duration
	// DedupWindow, when above zero, turns deduplication on for the run:
	// Comb's queue gets dedup_window_s (whole seconds) and every message
	// carries a producer id unique to it, "<run>-<producer>-<seq>" in base
	// 36, so every push pays for the id lookup and the remembered ids
	// without ever being a duplicate. JetStream gets the stream's
	// Duplicates window and a Nats-Msg-Id per message. Zero configures the
	// queue's window off and sends no ids.
	DedupWindow time.Duration

	// NATSURL is where Comb listens (TargetComb): one URL, or the servers
	// of a cluster of brokers separated by commas, over which the loader's
	// connections spread. It may carry credentials
	// as NATS URLs do, nats://user:password@host:port or nats://token@host;
	// the JetStream target's own server then requires the same. Output
	// shows it with the secret hidden (RedactedURL).
	NATSURL string
	// Creds is a .creds file (a user JWT and its nkey seed) to connect with.
	Creds string
	// TLSCA is a PEM file of the CAs that sign the server's certificate;
	// TLSCert and TLSKey are a client certificate for mutual TLS.
	TLSCA   string
	TLSCert string
	TLSKey  string
	// Verify checks every message: missing, duplicated, out of order.
	Verify bool
	// OutDir, when set, receives summary.json, intervals.csv, samples.csv
	// and report.png (one subdirectory per run with several targets).
	OutDir string
	// Report draws report.png into OutDir.
	Report bool
	// PushLog writes pushes.csv into OutDir: every push request's times,
	// due, sent, answered, and its first and last message delivered
	// (pushlog.go). Every delivered message takes a lock for it, so it
	// is for light and moderate loads.
	PushLog bool
	// PostgresURL, when set, lets the sampler read commits, WAL and
	// database size from PostgreSQL, and find its processes.
	PostgresURL string
	// BrokerPID is the broker process to sample; 0 finds the process
	// listening on NATSURL's port on this host.
	BrokerPID int

	// Logger receives diagnostics (the figures go to Run's writer); nil
	// discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults: a load a 2-core laptop sustains with
// the loader, Comb and PostgreSQL on it, in the reference soak's shape.
func DefaultConfig() Config {
	return Config{
		Mode:               ModeOpenLoop,
		Targets:            []Target{TargetComb},
		JetStreamSyncs:     []JetStreamSync{SyncDefault, SyncAlways},
		Queue:              "loadtest",
		Partitions:         200,
		Consumers:          32,
		Group:              "loadtest",
		ManualAck:          true,
		AckAsync:           true,
		AckInflight:        256,
		Rate:               20000,
		PushBatch:          100,
		Pacers:             8,
		MaxInflight:        1000,
		Payload:            256,
		Encoding:           EncodingJSON,
		PopBatch:           protocol.DefaultPopMax,
		PopPartitions:      1,
		PopWait:            2 * time.Second,
		Lease:              30 * time.Second,
		Conns:              4,
		Client:             ClientRaw,
		Duration:           60 * time.Second,
		Interval:           10 * time.Second,
		Drain:              30 * time.Second,
		CompletedRetention: 300 * time.Second,
		NATSURL:            "nats://127.0.0.1:4222",
		Report:             true,
	}
}

// Bounds that keep one run's memory and goroutines sane.
const (
	maxPartitions = 100000
	maxWorkers    = 10000
	maxPayload    = 1 << 20
	// minHeaders is the stored size of X-Load with an empty value, and
	// maxHeaders a bound well inside any message limit.
	minHeaders = len(`{"X-Load":[""]}`)
	maxHeaders = 64 << 10
	// maxDedupWindow is the broker's limit on dedup_window_s.
	maxDedupWindow = time.Duration(protocol.MaxDedupWindowS) * time.Second
	// minLease is the broker's lower bound on lease_ms.
	minLease = protocol.MinLeaseMS * time.Millisecond
)

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Mode {
	case ModeOpenLoop, ModeClosed:
	default:
		bad("mode %q: want openloop or closed", c.Mode)
	}
	if len(c.Targets) == 0 {
		bad("targets: at least one")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls-cert and tls-key go together")
	}
	if c.PushLog && c.OutDir == "" {
		bad("push-log writes pushes.csv into -out: give -out a directory")
	}
	seen := map[Target]bool{}
	for _, t := range c.Targets {
		switch t {
		case TargetComb, TargetJetStream:
		default:
			bad("target %q: want comb or jetstream", t)
		}
		if seen[t] {
			bad("target %q given twice", t)
		}
		seen[t] = true
	}
	if seen[TargetJetStream] {
		if len(c.JetStreamSyncs) == 0 {
			bad("jetstream sync: at least one of default, always")
		}
		for _, s := range c.JetStreamSyncs {
			if s != SyncDefault && s != SyncAlways {
				bad("jetstream sync %q: want default or always", s)
			}
		}
	}
	if err := protocol.ValidateQueue(c.Queue); err != nil {
		// The broker's own rule, said before a run rather than as its 400.
		if pe, ok := protocol.AsError(err); ok {
			err = errors.New(pe.Message)
		}
		bad("queue: %v", err)
	}
	if c.Group == "" {
		bad("group: empty")
	}
	inRange := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			bad("%s %d: want %d to %d", name, v, lo, hi)
		}
	}
	inRange("partitions", c.Partitions, 1, maxPartitions)
	inRange("consumers", c.Consumers, 1, maxWorkers)
	inRange("pacers", c.Pacers, 1, maxWorkers)
	inRange("push-batch", c.PushBatch, 1, protocol.MaxPushMessages)
	inRange("pop-batch", c.PopBatch, 1, protocol.MaxPopMessages)
	inRange("pop-partitions", c.PopPartitions, 1, protocol.MaxPopPartitions)
	inRange("conns", c.Conns, 1, 256)
	if c.Pipeline && !c.ManualAck {
		bad("pipeline: needs manual-ack (a transaction settles leases)")
	}
	if c.Pipeline && slices.Contains(c.Targets, TargetJetStream) {
		bad("pipeline: Comb only; JetStream has no transactions")
	}
	if c.AckNext && (!c.ManualAck || c.Pipeline || c.Client != ClientRaw || slices.Contains(c.Targets, TargetJetStream)) {
		bad("ack-next: Comb only, with manual-ack, the raw client and no pipeline")
	}
	if c.ManualAck && c.AckAsync {
		inRange("ack-inflight", c.AckInflight, 1, 1<<20)
	}
	if c.Mode == ModeOpenLoop {
		inRange("rate", c.Rate, 1, 1<<30)
		inRange("max-inflight", c.MaxInflight, 1, 1<<20)
	}
	if c.Client != ClientRaw && c.Client != ClientGo {
		bad("client %q: want raw or go", c.Client)
	}
	if _, err := parseEncoding(string(c.Encoding)); err != nil {
		errs = append(errs, err)
	} else {
		inRange("payload", c.Payload, minPayload(c.Encoding), maxPayload)
	}
	if c.Headers != 0 {
		inRange("headers", c.Headers, minHeaders, maxHeaders)
	}
	if c.Duration <= 0 {
		bad("duration %s: want > 0", c.Duration)
	}
	if c.Interval < time.Second || c.Interval%time.Second != 0 {
		bad("interval %s: want a whole number of seconds", c.Interval)
	}
	if c.Drain < 0 {
		bad("drain %s: want >= 0", c.Drain)
	}
	if c.CompletedRetention < 0 || c.CompletedRetention%time.Second != 0 {
		bad("completed-retention %s: want a whole number of seconds >= 0", c.CompletedRetention)
	}
	if c.DedupWindow < 0 || c.DedupWindow%time.Second != 0 || c.DedupWindow > maxDedupWindow {
		bad("dedup-window %s: want a whole number of seconds from 0 (off) to %s", c.DedupWindow, maxDedupWindow)
	}
	if c.Lease < minLease {
		bad("lease %s: want >= %s", c.Lease, minLease)
	}
	if c.PopWait < 0 {
		bad("pop-wait %s: want >= 0", c.PopWait)
	}
	if seen[TargetComb] {
		// A comma-separated list is a cluster's servers, as nats.Connect
		// takes them: each must be a URL.
		for _, s := range strings.Split(c.NATSURL, ",") {
			if u, err := url.Parse(strings.TrimSpace(s)); err != nil || u.Host == "" || strings.Contains(u.Host, ",") {
				bad("nats %q: want a URL such as nats://127.0.0.1:4222, or several separated by commas", c.RedactedURL())
				break
			}
		}
	}
	if c.PostgresURL != "" {
		// url.Parse quotes the whole URL in its error: not that, since it
		// may hold a password.
		if _, err := url.Parse(c.PostgresURL); err != nil {
			bad("postgres-url: not a URL")
		}
	}
	if c.BrokerPID < 0 {
		bad("broker-pid %d: want >= 0", c.BrokerPID)
	}
	return errors.Join(errs...)
}

// requestsPerSecond is the open loop's push request rate.
func (c *Config) requestsPerSecond() float64 {
	return float64(c.Rate) / float64(c.PushBatch)
}

// pushInterval is the open loop's time between two push requests, in
// nanoseconds: request k is due k of them after the start. A float, as
// k times it is computed: k*PushBatch*1e9 in integers overflows int64
// within a day at high rates.
func (c *Config) pushInterval() float64 {
	return float64(time.Second) * float64(c.PushBatch) / float64(c.Rate)
}

// RedactedURL is NATSURL with its password or token hidden, for output.
func (c *Config) RedactedURL() string { return redactURL(c.NATSURL) }

// redactURL hides the credentials of NATS URLs (comma-separated, as
// nats.Connect takes them) before they are printed: a password, or a
// token, which sits where a user name would.
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		switch {
		case err != nil:
			parts[i] = "(a NATS URL that does not parse)"
		case u.User == nil:
		case func() bool { _, ok := u.User.Password(); return ok }():
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			parts[i] = u.String()
		default:
			u.User = url.User("xxxxx") // a token
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// natsOptions are the connection options -creds and -tls-* ask for; URL
// credentials need none, nats.Connect reads them from the URL.
func (c *Config) natsOptions() []nats.Option {
	var opts []nats.Option
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts
}

// urlAuth applies the NATS URL's credentials, user and password or a
// token, to the JetStream target's own server, so that both targets pay
// for the same authentication.
func (c *Config) urlAuth(opts *server.Options) {
	u, err := url.Parse(c.NATSURL)
	if err != nil || u.User == nil {
		return
	}
	if pass, ok := u.User.Password(); ok {
		opts.Username, opts.Password = u.User.Username(), pass
	} else {
		opts.Authorization = u.User.Username()
	}
}

// urlUserInfo is the connection option for the URL's credentials, for
// connections to a server whose own URL carries none.
func (c *Config) urlUserInfo() []nats.Option {
	u, err := url.Parse(c.NATSURL)
	if err != nil || u.User == nil {
		return nil
	}
	if pass, ok := u.User.Password(); ok {
		return []nats.Option{nats.UserInfo(u.User.Username(), pass)}
	}
	return []nats.Option{nats.Token(u.User.Username())}
}
