package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/combmq/comb/internal/pgcluster"
	"github.com/combmq/comb/loadtest"
)

func init() {
	Register(Command{Name: "loadtest", Summary: "the soak loader: open-loop load, verification, resource sampling, a report", Run: runLoadtest})
}

const loadtestSynopsis = `Load a Comb broker (or, for comparison, an embedded NATS JetStream) the way
the reference soak did: push requests on a fixed open-loop schedule spread
over pacer workers, closed-loop consumers in one group with leased pops and
asynchronous acks. It prints its configuration, one line per -interval and a
final aggregate; -out DIR also gets summary.json, intervals.csv, samples.csv
(1 Hz: broker memory and CPU, PostgreSQL CPU, commits, WAL, database size)
and report.png.

-verify checks every message: missing (stored, never delivered), duplicates
(counted, allowed: at least once), order violations (a message delivered
before one that had to come first in its partition, or again after an
accepted ack). The exit status is 1 when anything is missing or out of
order, 2 for bad flags.

The broker's memory and CPU come from the process listening on -nats's port
when it runs on this host (or -broker-pid); PostgreSQL's figures need
-postgres-url (the "postgres" URL that comb serve logs as ready works as it
is: it names the private cluster's password file) or -data-dir, comb serve's
data directory. Ctrl-C stops early and still prints the final figures and
writes the files; a second Ctrl-C exits at once.`

// parseLoadtest reads flags, then environment twins. Errors have been
// printed to w when it returns; Run validates the rest.
func parseLoadtest(args []string, getenv func(string) string, w io.Writer) (loadtest.Config, loadtestExtras, error) {
	cfg := loadtest.DefaultConfig()
	fs := loadtestFlags(&cfg, w)
	var extras loadtestExtras
	fs.StringVar(&extras.cpuProfile, "cpuprofile", "", "write the loader's own CPU profile (pprof) to this file")
	fs.StringVar(&extras.dataDir, "data-dir", "", "data directory of a `comb serve` on this host that runs a private PostgreSQL: "+
		"the sampler finds its URL and password there (instead of -postgres-url; needs the right to read the password file)")
	mode := fs.Lookup("mode")
	targets := fs.Lookup("target")
	syncs := fs.Lookup("jetstream-sync")
	enc := fs.Lookup("payload-encoding")
	client := fs.Lookup("client")
	logLevel := fs.Lookup("log-level")
	if err := parseWithEnv(fs, args, getenv); err != nil {
		return cfg, extras, err
	}
	cfg.Mode = loadtest.Mode(mode.Value.String())
	cfg.Encoding = loadtest.Encoding(enc.Value.String())
	cfg.Client = loadtest.Client(client.Value.String())
	cfg.Targets = nil
	for _, t := range splitList(targets.Value.String()) {
		cfg.Targets = append(cfg.Targets, loadtest.Target(t))
	}
	cfg.JetStreamSyncs = nil
	for _, s := range splitList(syncs.Value.String()) {
		cfg.JetStreamSyncs = append(cfg.JetStreamSyncs, loadtest.JetStreamSync(s))
	}
	extras.logLevel = logLevel.Value.String()
	if extras.dataDir != "" {
		if cfg.PostgresURL != "" {
			err := errors.New("-data-dir and -postgres-url both name the PostgreSQL to sample: give one")
			fmt.Fprintf(w, "comb loadtest: %v\n", err)
			return cfg, extras, err
		}
		u, err := pgcluster.URLFromDir(filepath.Join(extras.dataDir, "postgres"), "")
		if err != nil {
			err = fmt.Errorf("-data-dir: %w", err)
			fmt.Fprintf(w, "comb loadtest: %v\n", err)
			return cfg, extras, err
		}
		cfg.PostgresURL = u
	}
	return cfg, extras, nil
}

// loadtestExtras are the flags that belong to the command, not to the
// load test.
type loadtestExtras struct {
	logLevel   string
	cpuProfile string
	dataDir    string
}

func loadtestFlags(cfg *loadtest.Config, w io.Writer) *flag.FlagSet {
	fs := newFlagSet("loadtest", loadtestSynopsis, w)
	fs.String("mode", string(cfg.Mode), "openloop (fixed schedule, latency from the scheduled send time) or closed (as fast as answered)")
	fs.String("target", joinTargets(cfg.Targets), "comb, jetstream, or both comma-separated: run in turn and compared")
	fs.String("jetstream-sync", joinSyncs(cfg.JetStreamSyncs), "JetStream file store sync: default, always, or both comma-separated (one run each)")
	fs.StringVar(&cfg.Queue, "queue", cfg.Queue, "queue to load (JetStream: subject prefix)")
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "partitions; each push request goes to one, round robin")
	fs.IntVar(&cfg.Consumers, "consumers", cfg.Consumers, "closed-loop consumers, all in one group")
	fs.BoolVar(&cfg.ManualAck, "manual-ack", cfg.ManualAck, "leased pops settled by acks; false pops with auto_ack")
	fs.BoolVar(&cfg.AckNext, "ack-next", cfg.AckNext, "carry each batch's acks on the consumer's next pop instead of an ack request (Comb, raw client; ack rtt is then not measured)")
	fs.BoolVar(&cfg.AckAsync, "ack-async", cfg.AckAsync, "send each batch's ack asynchronously, so consumers pop again at once")
	fs.IntVar(&cfg.AckInflight, "ack-inflight", cfg.AckInflight, "most asynchronous acks unanswered, over all consumers; consumers wait beyond it")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "offered messages per second (open loop)")
	fs.IntVar(&cfg.PushBatch, "push-batch", cfg.PushBatch, "messages per push request")
	fs.IntVar(&cfg.Pacers, "pacers", cfg.Pacers, "producer workers sharing the schedule (closed loop: one push in flight each)")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", cfg.MaxInflight, "most push requests unanswered (open loop); a request due beyond it is shed and counted")
	fs.IntVar(&cfg.Payload, "payload", cfg.Payload, "bytes per message")
	fs.BoolVar(&cfg.Pipeline, "pipeline", cfg.Pipeline, "settle each popped batch with one transaction (comb.txn) that acks it and pushes its messages to <queue>.out (max_age_s 60), instead of an ack")
	fs.IntVar(&cfg.Headers, "headers", cfg.Headers, "bytes of headers per message: one header X-Load whose stored form is this long (at least 15); 0 sends none")
	fs.String("payload-encoding", string(cfg.Encoding), "json (a JSON string, travels as data) or binary (travels as data_b64)")
	fs.IntVar(&cfg.PopBatch, "pop-batch", cfg.PopBatch, "most messages per pop")
	fs.IntVar(&cfg.PopPartitions, "pop-partitions", cfg.PopPartitions, "most partitions one pop leases")
	fs.DurationVar(&cfg.PopWait, "pop-wait", cfg.PopWait, "long-poll time of a pop when nothing is ready")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "lease time of a pop (JetStream: AckWait)")
	fs.StringVar(&cfg.Group, "group", cfg.Group, "consumer group")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "NATS connections the loader spreads its requests over")
	fs.String("client", string(cfg.Client), "raw (the loader's own lean wire encoder, so its CPU stays out of the measurement) or go (clients/go)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the producers run")
	fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "period of the interval lines, whole seconds")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "longest wait after the producers stop for the consumers to take what was pushed")
	fs.DurationVar(&cfg.CompletedRetention, "completed-retention", cfg.CompletedRetention, "queue setting: delete completed messages after this long (0 keeps them)")
	fs.DurationVar(&cfg.DedupWindow, "dedup-window", cfg.DedupWindow, "deduplication, whole seconds, 0 = off: > 0 sets the queue's dedup_window_s and gives every message a unique producer id (never a duplicate, but every push pays for the id check); JetStream: the stream's duplicate window and a Nats-Msg-Id per message")
	fs.StringVar(&cfg.NATSURL, "nats", cfg.NATSURL, "NATS URL of the Comb broker, or a cluster's brokers separated by commas (nats://a:4222,nats://b:4222); credentials as nats://user:password@host:port or nats://token@host "+
		"(the jetstream target's own server then requires the same); output hides them")
	fs.StringVar(&cfg.Creds, "creds", cfg.Creds, "NATS .creds file (user JWT and nkey seed) to connect with")
	fs.StringVar(&cfg.TLSCA, "tls-ca", cfg.TLSCA, "PEM file of the CAs that sign the broker's TLS certificate")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "client certificate (PEM) for mutual TLS, with -tls-key")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "client certificate's private key (PEM), with -tls-cert")
	fs.BoolVar(&cfg.Verify, "verify", cfg.Verify, "check every message: missing, duplicated, out of order; exit 1 if missing or out of order")
	fs.StringVar(&cfg.OutDir, "out", cfg.OutDir, "directory for summary.json, intervals.csv, samples.csv and report.png")
	fs.BoolVar(&cfg.Report, "report", cfg.Report, "draw report.png into -out (false skips the six-panel PNG)")
	fs.BoolVar(&cfg.PushLog, "push-log", cfg.PushLog, "write pushes.csv into -out: each push request's send, answer, and first and last delivery, from when it was due (for light loads: a lock a delivered message)")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", cfg.PostgresURL, "PostgreSQL URL of the broker's database, for the sampler's commits, WAL, size and CPU")
	fs.IntVar(&cfg.BrokerPID, "broker-pid", cfg.BrokerPID, "broker process to sample; 0 finds the one listening on -nats's port on this host")
	fs.String("log-level", "info", "debug, info, warn or error (diagnostics on stderr; figures go to stdout)")
	return fs
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func joinTargets(ts []loadtest.Target) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

func joinSyncs(ss []loadtest.JetStreamSync) string {
	s := make([]string, len(ss))
	for i, v := range ss {
		s[i] = string(v)
	}
	return strings.Join(s, ",")
}

func runLoadtest(ctx context.Context, env Env, args []string) int {
	cfg, extras, err := parseLoadtest(args, env.Getenv, env.Stderr)
	if err != nil {
		return usageExit(err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(extras.logLevel)); err != nil {
		fmt.Fprintf(env.Stderr, "comb loadtest: -log-level %q: want debug, info, warn or error\n", extras.logLevel)
		return 2
	}
	if extras.cpuProfile != "" {
		f, err := os.Create(extras.cpuProfile)
		if err != nil {
			fmt.Fprintf(env.Stderr, "comb loadtest: -cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(env.Stderr, "comb loadtest: -cpuprofile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	cfg.Logger = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go watchSignals(sigs, done, func(os.Signal) { cancel() }, env.Exit, cfg.Logger)

	_, err = loadtest.Run(ctx, cfg, env.Stdout)
	switch {
	case errors.Is(err, loadtest.ErrVerifyFailed):
		fmt.Fprintf(env.Stderr, "comb loadtest: %v\n", err)
		return 1
	case errors.Is(err, loadtest.ErrInvalidConfig):
		fmt.Fprintf(env.Stderr, "comb loadtest: %v\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(env.Stderr, "comb loadtest: %v\n", err)
		return 1
	}
	return 0
}
