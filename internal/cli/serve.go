package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"

	"github.com/combmq/comb/broker"
)

func init() {
	Register(Command{Name: "serve", Summary: "run the broker: embedded NATS, the bridge, and PostgreSQL", Run: runServe})
}

const serveSynopsis = `Run the broker: an embedded NATS server, the bridge that serves the Comb
protocol on it, and PostgreSQL. Without -postgres-url, a private PostgreSQL
cluster is created (first run) or reused in <data-dir>/postgres, from the
PostgreSQL installed on this machine. The first SIGINT or SIGTERM drains and
exits 0; a second one exits at once with 1.

Settings come from, last one winning: the defaults below, the -config file
(nats-server's syntax; Comb's settings in its comb { } block, under the
names with underscores: -push-workers is push_workers), the COMB_…
environment variables, then the flags. docs/configuration.md has them all.`

// configFlag names the configuration file; it is a flag and a variable
// only, since a file cannot name itself.
const configFlag = "config"

// serveConfig is `comb serve`'s configuration: the broker's, and where it
// was read from.
type serveConfig struct {
	broker.Config
	// File is the configuration file, "" for none.
	File string
	// warnings are nats-server's about File, logged once a logger exists.
	warnings []error
}

// serveFlags returns the flag set of `comb serve`, bound to cfg and file.
func serveFlags(cfg *broker.Config, file *string, w io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", serveSynopsis, w)
	fs.StringVar(file, configFlag, *file, "configuration file in nats-server's syntax, with Comb's settings in a comb { } block")
	for _, s := range broker.Settings() {
		fs.Var(s.Value(cfg), s.Flag(), s.Usage)
		// Show the effective default, also where the field's own zero
		// means "the file's, else this".
		fs.Lookup(s.Flag()).DefValue = s.Default
	}
	fs.Usage = func() { serveUsage(fs, w) }
	return fs
}

// serveUsage lists the flags in the settings' groups, in the settings'
// order, in newFlagSet's format.
func serveUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: comb %s [flags]\n\n%s\n\nFlags:\n", fs.Name(), serveSynopsis)
	print := func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" {
			def = fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "  -%s, $%s\n      %s%s\n", f.Name, EnvName(f.Name), f.Usage, def)
	}
	print(fs.Lookup(configFlag))
	group := ""
	for _, s := range broker.Settings() {
		if s.Group != group {
			group = s.Group
			fmt.Fprintf(w, "\n%s:\n", group)
		}
		print(fs.Lookup(s.Flag()))
	}
}

// parseServe builds the configuration from, in rising precedence, the
// defaults, the configuration file, the environment and the flags, then
// validates it. Errors have been printed to w when it returns.
func parseServe(args []string, getenv func(string) string, w io.Writer) (serveConfig, error) {
	// A first pass finds -config and which flags are set; it parses into
	// a scratch copy, since the file and the environment come below them.
	var scratch broker.Config
	var file string
	probe := serveFlags(&scratch, &file, w)
	if err := probe.Parse(args); err != nil {
		return serveConfig{}, err
	}
	if probe.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q", probe.Arg(0))
		fmt.Fprintf(w, "comb serve: %v\n", err)
		return serveConfig{}, err
	}
	set := map[string]bool{}
	probe.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set[configFlag] {
		file = getenv(EnvName(configFlag))
	}

	cfg := serveConfig{Config: broker.DefaultConfig(), File: file}
	fail := func(err error) (serveConfig, error) {
		fmt.Fprintf(w, "comb serve: %v\n", err)
		return cfg, err
	}
	if file != "" {
		warnings, err := cfg.LoadFile(file)
		cfg.warnings = warnings
		if err != nil {
			return fail(err)
		}
	}
	// The environment, then the same arguments again, onto the real
	// configuration; they parsed once, so they parse again.
	fs := serveFlags(&cfg.Config, &cfg.File, io.Discard)
	if err := applyEnv(fs, set, getenv); err != nil {
		return fail(err)
	}
	if err := fs.Parse(args); err != nil {
		return fail(err)
	}
	if err := cfg.Validate(); err != nil {
		return fail(err)
	}
	return cfg, nil
}

func runServe(ctx context.Context, env Env, args []string) int {
	cfg, err := parseServe(args, env.Getenv, env.Stderr)
	if err != nil {
		return usageExit(err)
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if cfg.File != "" {
		log.Info("configuration file", "path", cfg.File)
	}
	for _, w := range cfg.warnings {
		log.Warn("configuration file", "warning", w.Error())
	}
	applyGC(cfg.Config, env.Getenv, log)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	var term atomic.Bool // the first signal was SIGTERM
	go watchSignals(sigs, done, func(s os.Signal) {
		term.Store(s == syscall.SIGTERM)
		cancel()
	}, env.Exit, log)

	b, err := broker.Start(ctx, cfg.Config, log)
	if err != nil {
		log.Error("comb serve failed", "err", err)
		return 1
	}
	attrs := []any{"nats", b.ClientURL(), "prefix", b.Prefix(), "postgres", b.LogPostgresURL()}
	if u := b.MonitorURL(); u != "" {
		attrs = append(attrs, "monitor", u)
	}
	log.Info("comb ready", attrs...)
	<-ctx.Done()
	if term.Load() {
		// An orchestrator's stop: let clients move to other brokers.
		log.Info("SIGTERM: draining, then lame duck mode")
		b.StopLameDuck()
	} else {
		b.Stop()
	}
	log.Info("comb stopped")
	return 0
}

// watchSignals turns the first signal into a drain (cancel) and the second
// into an immediate exit, for an operator who will not wait.
func watchSignals(sigs <-chan os.Signal, done <-chan struct{}, cancel func(os.Signal), exit func(int), log *slog.Logger) {
	select {
	case s := <-sigs:
		log.Info("signal received, draining; send another to exit at once", "signal", s.String())
		cancel(s)
	case <-done:
		return
	}
	select {
	case s := <-sigs:
		log.Warn("second signal, exiting at once", "signal", s.String())
		exit(1)
	case <-done:
	}
}

// applyGC sets the process's garbage collector from the configuration
// (gc_percent, memory_limit), except where the environment's GOGC or
// GOMEMLIMIT, which the runtime has read already, says otherwise.
func applyGC(c broker.Config, getenv func(string) string, log *slog.Logger) {
	if v := getenv("GOGC"); v != "" {
		log.Info("garbage collector target from the environment", "GOGC", v)
	} else {
		debug.SetGCPercent(cmp.Or(c.GCPercent, broker.DefaultGCPercent))
	}
	if v := getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from the environment", "GOMEMLIMIT", v)
	} else if c.MemoryLimit > 0 {
		debug.SetMemoryLimit(c.MemoryLimit)
	}
}
