package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/protocol"
)

// The commands for people (queues, info, push, pop, tail, ack, groups, dlq,
// configure, seek, delete) share what this file holds: GNU-style flags
// (pflag: --json, -s, flags after the arguments), the nats CLI's connection
// flags, variables and contexts, one connection per run, and errors that
// say what to do.

// opsCommand is one command for people.
type opsCommand struct {
	name string
	// args is the synopsis of the positional arguments, as in "QUEUE [DATA|-]".
	args     string
	summary  string
	synopsis string
	// minArgs and maxArgs bound the positional arguments; maxArgs -1 means
	// no bound. The first argument of every command but queues is a queue
	// name, checked before anything is sent.
	minArgs, maxArgs int
	// setup binds the command's own flags to fs and returns its body, which
	// runs once the flags and arguments are parsed.
	setup func(fs *pflag.FlagSet) func(ctx context.Context, s *session, args []string) error
}

// registerOps registers c as a `comb` subcommand.
func registerOps(c opsCommand) {
	Register(Command{Name: c.name, Summary: c.summary, Run: func(ctx context.Context, env Env, args []string) int {
		return runOps(ctx, env, c, args)
	}})
}

// usageError is a mistake in the command line: exit code 2, with the
// command's usage line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitError is a failure already explained to the user, with its exit code.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// connFlags are the connection flags every command for people takes, with
// the nats CLI's names and environment variables.
type connFlags struct {
	server, user, password, token, creds, nkey string
	tlsCA, tlsCert, tlsKey, context, prefix    string
	timeout                                    time.Duration
}

// connFlagEnv names the environment twin of each connection flag: the nats
// CLI's, so that an operator's environment works for both tools.
var connFlagEnv = map[string]string{
	"server":   "NATS_URL",
	"user":     "NATS_USER",
	"password": "NATS_PASSWORD",
	"token":    "NATS_TOKEN",
	"creds":    "NATS_CREDS",
	"nkey":     "NATS_NKEY",
	"tls-ca":   "NATS_CA",
	"tls-cert": "NATS_CERT",
	"tls-key":  "NATS_KEY",
	"context":  "NATS_CONTEXT",
	"timeout":  "NATS_TIMEOUT",
	"prefix":   "COMB_PREFIX",
}

// defaultOpsTimeout is how long a request waits for its reply, the nats
// CLI's default; a pop's --wait comes on top.
const defaultOpsTimeout = 5 * time.Second

func (c *connFlags) bind(fs *pflag.FlagSet) {
	fs.StringVarP(&c.server, "server", "s", "", "NATS server URL or comma-separated list (default: the context's, else nats://127.0.0.1:4222)")
	fs.StringVar(&c.user, "user", "", "user name")
	fs.StringVar(&c.password, "password", "", "password")
	fs.StringVar(&c.token, "token", "", "authentication token")
	fs.StringVar(&c.creds, "creds", "", "user credentials file (JWT and seed)")
	fs.StringVar(&c.nkey, "nkey", "", "nkey seed file")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "CA certificate file that signs the server's certificate")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate file, for servers that verify clients")
	fs.StringVar(&c.tlsKey, "tls-key", "", "client certificate's private key file")
	fs.StringVar(&c.context, "context", "", "nats CLI context to use, by name or context file (nats context ls; default: the selected one)")
	fs.StringVar(&c.prefix, "prefix", protocol.DefaultPrefix, "first subject token of the Comb service (comb serve -prefix)")
	fs.DurationVar(&c.timeout, "timeout", defaultOpsTimeout, "how long to wait for a reply")
	for name, env := range connFlagEnv {
		f := fs.Lookup(name)
		f.Usage += " ($" + env + ")"
	}
}

// applyEnv gives each connection flag not on the command line the value of
// its variable. Like the nats CLI, a variable beats the context.
func (c *connFlags) applyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	for name, env := range connFlagEnv {
		f := fs.Lookup(name)
		if f.Changed {
			continue
		}
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				return usagef("$%s=%q: %v", env, v, err)
			}
			f.Changed = true
		}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: give both")
	}
	if c.timeout <= 0 {
		return usagef("--timeout %s: want a positive duration", c.timeout)
	}
	if err := protocol.ValidateQueue(c.prefix); err != nil {
		return usagef("--prefix %q: not a subject prefix", c.prefix)
	}
	return nil
}

// session is one run of a command for people: its flags, output and, once
// the first request needs it, its connection.
type session struct {
	env  Env
	name string
	conn connFlags
	json bool

	nc     *nats.Conn
	client *comb.Client
	// servers is the server list for messages, passwords redacted.
	servers string
	// contextName is the nats CLI context in use, "" for none.
	contextName string
	// perms receives the server's permission violations, which arrive
	// asynchronously; a request waiting for its reply is cut short by one.
	perms chan error
}

func runOps(ctx context.Context, env Env, c opsCommand, args []string) int {
	fs := pflag.NewFlagSet("comb "+c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	body := c.setup(fs)
	s := &session{env: env, name: c.name}
	fs.BoolVar(&s.json, "json", false, "print JSON for scripts instead of tables")
	conn := pflag.NewFlagSet("connection", pflag.ContinueOnError)
	s.conn.bind(conn)
	conn.SortFlags = false
	fs.AddFlagSet(conn)

	usageLine := fmt.Sprintf("Usage: comb %s %s [flags]", c.name, c.args)
	fail := func(err error) int {
		var ue usageError
		var ee exitError
		switch {
		case errors.As(err, &ue):
			fmt.Fprintf(env.Stderr, "comb %s: %s\n%s\n`comb %s -h` lists the flags.\n", c.name, ue.msg, usageLine, c.name)
			return 2
		case errors.As(err, &ee):
			if ee.msg != "" {
				fmt.Fprintf(env.Stderr, "comb %s: %s\n", c.name, ee.msg)
			}
			return ee.code
		}
		fmt.Fprintf(env.Stderr, "comb %s: %v\n", c.name, err)
		return 1
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			own := pflag.NewFlagSet("", pflag.ContinueOnError)
			own.SortFlags = false
			fs.VisitAll(func(f *pflag.Flag) {
				if conn.Lookup(f.Name) == nil {
					own.AddFlag(f)
				}
			})
			fmt.Fprintf(env.Stdout, "%s\n\n%s\n\nFlags:\n%s\nConnection flags (as the nats CLI's; a flag beats its variable, which beats the context):\n%s",
				usageLine, c.synopsis, own.FlagUsages(), conn.FlagUsages())
			return 0
		}
		return fail(usageError{err.Error()})
	}
	pos := fs.Args()
	switch {
	case len(pos) < c.minArgs:
		return fail(usagef("missing %s", strings.Fields(c.args)[len(pos)]))
	case c.maxArgs >= 0 && len(pos) > c.maxArgs:
		return fail(usagef("unexpected argument %q", pos[c.maxArgs]))
	}
	if c.minArgs > 0 {
		if err := protocol.ValidateQueue(pos[0]); err != nil {
			return fail(usagef("%s", err.(*protocol.Error).Message))
		}
	}
	if err := s.conn.applyEnv(conn, env.Getenv); err != nil {
		return fail(err)
	}

	// Ctrl-C cancels the command: tail stops, a waiting pop gives up.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer s.close()
	if err := body(ctx, s, pos); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			fmt.Fprintf(env.Stderr, "comb %s: interrupted\n", c.name)
			return 130
		}
		return fail(err)
	}
	return 0
}

// contextRoot is the folder the nats CLI keeps its contexts under:
// $XDG_CONFIG_HOME, else .config in the user's home directory as the
// system's user database has it (not $HOME: natscontext does the same, and
// both tools must find the same contexts), else in $HOME.
func contextRoot(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return x
	}
	home := ""
	if u, err := user.Current(); err == nil {
		home = u.HomeDir
	}
	if home == "" {
		home = getenv("HOME")
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".config")
}

// authKeys are the fields of a context file that authenticate; a flag or
// variable that authenticates replaces them all, so that --creds is used
// even when the context has a user.
var authKeys = []string{"user", "password", "token", "creds", "nkey", "user_jwt", "user_seed", "nsc"}

// natsContext returns the nats CLI context the connection is made with:
// the one --context (or $NATS_CONTEXT) names, else the selected one, else
// an empty one, with the flags applied on top.
func (s *session) natsContext(ctx context.Context) (*natscontext.Context, error) {
	c := s.conn
	opts := []natscontext.Option{
		natscontext.WithServerURL(c.server),
		natscontext.WithUser(c.user), natscontext.WithPassword(c.password),
		natscontext.WithToken(c.token), natscontext.WithCreds(c.creds), natscontext.WithNKey(c.nkey),
		natscontext.WithCA(c.tlsCA), natscontext.WithCertificate(c.tlsCert), natscontext.WithKey(c.tlsKey),
	}
	name := c.context
	var data []byte
	switch {
	case strings.HasSuffix(name, ".json") && fileExists(name):
		// Like the nats CLI, --context also takes a context file's path.
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		data = b
	default:
		backend := natscontext.NewFileBackendAt(contextRoot(s.env.Getenv))
		reg := natscontext.NewRegistry(backend)
		if name == "" {
			sel, err := reg.Selected(ctx)
			if err != nil && !errors.Is(err, natscontext.ErrNoneSelected) {
				return nil, fmt.Errorf("the selected nats context: %w", err)
			}
			name = sel
		}
		if name == "" {
			return natscontext.New("", false, opts...)
		}
		b, err := backend.Load(ctx, name)
		if err != nil {
			return nil, exitError{1, fmt.Sprintf("nats context %q: %v; `nats context ls` lists them (--context, $NATS_CONTEXT)", name, err)}
		}
		data = b
	}
	if c.user != "" || c.token != "" || c.creds != "" || c.nkey != "" {
		var fields map[string]any
		if err := json.Unmarshal(data, &fields); err != nil {
			return nil, fmt.Errorf("nats context %q: %w", name, err)
		}
		for _, k := range authKeys {
			delete(fields, k)
		}
		data, _ = json.Marshal(fields)
	}
	nctx, err := natscontext.NewFromBytes(data, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats context %q: %w", name, err)
	}
	nctx.Name = name
	return nctx, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// connect makes the session's connection on first use.
func (s *session) connect(ctx context.Context) (*comb.Client, error) {
	if s.client != nil {
		return s.client, nil
	}
	nctx, err := s.natsContext(ctx)
	if err != nil {
		return nil, err
	}
	s.servers = redactServers(nctx.ServerURL())
	s.contextName = nctx.Name
	s.perms = make(chan error, 16)
	opts, err := nctx.NATSOptions(
		nats.Name("comb "+s.name),
		nats.Timeout(s.conn.timeout),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case s.perms <- err:
				default:
				}
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connection settings%s: %w", s.fromContext(), err)
	}
	nc, err := nats.Connect(nctx.ServerURL(), opts...)
	if err != nil {
		return nil, s.explainConnect(err)
	}
	s.nc = nc
	s.client = comb.New(nc, comb.WithPrefix(s.conn.prefix), comb.WithTimeout(s.conn.timeout))
	return s.client, nil
}

func (s *session) close() {
	if s.nc != nil {
		s.nc.Close()
	}
}

func (s *session) fromContext() string {
	if s.contextName == "" {
		return ""
	}
	return fmt.Sprintf(" (nats context %q)", s.contextName)
}

func (s *session) explainConnect(err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return fmt.Errorf("%s refused the credentials%s: %v; check --user/--password, --token, --creds or --nkey", s.servers, s.fromContext(), err)
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("cannot reach a NATS server at %s%s: %v; is `comb serve` running? (--server, $NATS_URL, --context)", s.servers, s.fromContext(), err)
	case strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509:") || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.Is(err, nats.ErrSecureConnRequired):
		return fmt.Errorf("TLS with %s%s: %v (--tls-ca, --tls-cert, --tls-key)", s.servers, s.fromContext(), err)
	}
	return fmt.Errorf("connect to %s%s: %w", s.servers, s.fromContext(), err)
}

// redactServers returns a server list with the passwords of its URLs
// replaced: messages may show it, never a password.
func redactServers(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				p = u.Redacted()
			}
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// call runs one request of the command on queue ("" for none) and turns
// its error into one that says what to do.
func (s *session) call(ctx context.Context, queue string, f func(ctx context.Context, c *comb.Client) error) error {
	if err := s.callRaw(ctx, f); err != nil {
		return s.explain(err, queue)
	}
	return nil
}

// callRaw runs one request, connecting first if needed. A permission
// violation the server reports while the request waits ends it and is its
// error.
func (s *session) callRaw(ctx context.Context, f func(ctx context.Context, c *comb.Client) error) error {
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case e := <-s.perms:
			cancel(e)
		case <-done:
		}
	}()
	err = f(rctx, c)
	if err == nil {
		return nil
	}
	if cause := context.Cause(rctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return cause
	}
	return err
}

var permSubjectRe = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "?([^"\s]+)"?`)

func (s *session) explain(err error, queue string) error {
	var pe *protocol.Error
	switch {
	case errors.Is(err, context.Canceled):
		return err // Ctrl-C: runOps says so
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("no Comb broker answers on %s: is `comb serve` running? (--server)", s.servers)
	case errors.Is(err, nats.ErrPermissionViolation):
		if m := permSubjectRe.FindStringSubmatch(err.Error()); m != nil {
			what := "publish to"
			if strings.EqualFold(m[1], "subscription") {
				what = "subscribe to"
			}
			return fmt.Errorf("the NATS server does not allow this user to %s %s%s: permissions violation; ask for that permission or use other credentials (--user, --creds, --context)",
				what, m[2], s.fromContext())
		}
		return fmt.Errorf("the NATS server refused a subject%s: %v", s.fromContext(), err)
	case errors.Is(err, comb.ErrNotFound) && queue != "":
		return exitError{1, fmt.Sprintf("queue %s does not exist; `comb queues` lists them", queue)}
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no reply from Comb on %s within %s: the broker may be overloaded or stopping (--timeout)", s.servers, s.conn.timeout)
	case errors.As(err, &pe) && pe.Code == protocol.CodeBadRequest:
		// The request was built from the command line: a bad argument.
		return exitError{2, pe.Message}
	case errors.As(err, &pe):
		return exitError{1, pe.Error()}
	}
	return err
}

// printJSON writes v as one JSON document on one line. It is not indented:
// indenting would rewrite the messages' data, which it holds byte for byte.
func (s *session) printJSON(v any) error {
	enc := json.NewEncoder(s.env.Stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under a header, aligned in columns.
func (s *session) table(header []string, rows [][]string) {
	tw := tabwriter.NewWriter(s.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// note writes a line for people on standard error, so that standard output
// stays the command's result.
func (s *session) note(format string, args ...any) {
	fmt.Fprintf(s.env.Stderr, format+"\n", args...)
}
