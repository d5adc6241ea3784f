// Package cli is the `comb` command: a registry of subcommands, the
// flag-and-environment parsing they share, and their implementations.
// Flags and COMB_* environment variables are read here and nowhere else.
//
// A subcommand lives in its own file and registers itself from init:
//
//	func init() {
//		Register(Command{Name: "loadtest", Summary: "…", Run: runLoadtest})
//	}
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// Env is what a command may use of its process. Tests replace it.
type Env struct {
	// Stdin is what push reads lines from and delete asks on; nil reads
	// as empty.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Terminal reports whether Stdin is a terminal a person types on; nil
	// means it is not.
	Terminal func() bool
	// Getenv reads an environment variable; os.Getenv in production.
	Getenv func(string) string
	// Exit ends the process at once; os.Exit in production. Commands
	// return their exit code instead, except for a second interrupt.
	Exit func(code int)
}

// Command is one `comb` subcommand.
type Command struct {
	// Name is the word after `comb`.
	Name string
	// Summary is one line for `comb help`.
	Summary string
	// Run runs the command with the arguments after its name and returns
	// the process exit code: 0 success, 1 failure, 2 bad usage.
	Run func(ctx context.Context, env Env, args []string) int
}

var commands = map[string]Command{}

// Register adds a subcommand. It panics on a duplicate name, which is a
// programming error caught by any test of the package.
func Register(c Command) {
	if _, dup := commands[c.Name]; dup {
		panic("cli: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

// Main runs `comb` with the process's arguments (without the program name)
// and returns the exit code.
func Main(args []string) int {
	return Run(context.Background(), Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Terminal: func() bool { return isTerminal(os.Stdin) }, Getenv: os.Getenv, Exit: os.Exit}, args)
}

// Run dispatches args to a subcommand.
func Run(ctx context.Context, env Env, args []string) int {
	if len(args) == 0 {
		usage(env.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.Run(ctx, env, []string{"-h"})
			}
			fmt.Fprintf(env.Stderr, "comb: unknown command %q\n\n", args[1])
			usage(env.Stderr)
			return 2
		}
		usage(env.Stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(env.Stderr, "comb: unknown command %q\n\n", name)
		usage(env.Stderr)
		return 2
	}
	return c.Run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Comb is a partitioned message queue on PostgreSQL, spoken to over NATS request-reply.\n\n"+
		"Usage:\n  comb <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "  %s\t%s\n", n, commands[n].Summary)
	}
	fmt.Fprintf(tw, "  help\t%s\n", "this text; `comb help <command>` shows a command's flags")
	_ = tw.Flush()
	fmt.Fprint(w, "\nEvery flag of serve and loadtest has an environment twin: -data-dir is COMB_DATA_DIR. A flag wins over its variable.\n"+
		"The queue commands (queues, push, pop, …) connect as the nats CLI does: --server, --user, --creds, …, $NATS_URL and the\n"+
		"other NATS_ variables, and the nats CLI's contexts (nats context save/select).\n")
}

// EnvName returns the environment twin of a flag: COMB_ and the name in
// upper case with dashes as underscores (-pg-port is COMB_PG_PORT).
func EnvName(flagName string) string {
	return "COMB_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints its usage, environment twins included, to w.
func newFlagSet(name, synopsis string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage: comb %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(w, "  -%s, $%s\n      %s%s\n", f.Name, EnvName(f.Name), f.Usage, def)
		})
	}
	return fs
}

// parseWithEnv parses args, then gives every flag not set on the command
// line the value of its environment twin, if that is set, so the order of
// precedence is flag, then environment, then default. A bad value in a
// variable is reported under the variable's name. Like fs.Parse, it prints
// what went wrong to the flag set's output.
func parseWithEnv(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q", fs.Arg(0))
		fmt.Fprintf(fs.Output(), "comb %s: %v\n", fs.Name(), err)
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	err := applyEnv(fs, set, getenv)
	if err != nil {
		fmt.Fprintf(fs.Output(), "comb %s: %v\n", fs.Name(), err)
	}
	return err
}

// applyEnv gives every flag of fs that set does not name the value of its
// environment twin, if that is set. A bad value is reported under the
// variable's name.
func applyEnv(fs *flag.FlagSet, set map[string]bool, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		v := getenv(EnvName(f.Name))
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, err))
		}
	})
	return errors.Join(errs...)
}

// usageExit maps a flag parsing error to an exit code: -h is a success,
// anything else bad usage. The flag package has already printed why.
func usageExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
