// Package embeddednats runs a NATS server inside the Comb process: the
// client listener, optional monitoring, auth, TLS and cluster routes, its
// log through slog, and an in-process connection so the broker's own
// traffic takes no TCP hop.
package embeddednats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/combmq/comb/protocol"
)

// DefaultMaxPayload is the largest message the server accepts unless
// Config.MaxPayload says otherwise: protocol.MaxRequestBytes (8 MiB), so
// that the largest request the broker accepts arrives, and a 1 MiB message
// still fits a pop reply after base64 and a JSON envelope.
const DefaultMaxPayload = protocol.MaxRequestBytes

// Comb's defaults for what neither Config nor its Options set. The host is
// loopback, secure by default: nats-server itself binds every interface.
const (
	DefaultHost                = "127.0.0.1"
	DefaultPort                = server.DEFAULT_PORT
	DefaultMaxPending          = server.MAX_PENDING_SIZE
	DefaultLameDuckDuration    = 10 * time.Second
	DefaultLameDuckGracePeriod = 2 * time.Second
)

// NoMonitoring as Config.HTTPPort turns monitoring off even when Options
// enable it; HTTPPort 0 means "unset", which is nats-server's own
// convention for every option.
const NoMonitoring = -2

// Config configures the embedded server. The zero value listens on
// 127.0.0.1:4222 with monitoring off.
//
// Options, when set, are the base; every other field overrides them where
// it is set (not its zero value), and Comb's own defaults below fill only
// what neither sets.
type Config struct {
	// Options are nats-server options read from a configuration file
	// (authorization, accounts, tls, cluster, limits, ...); the fields
	// below override them where set. Start does not modify them.
	Options *server.Options

	// Host is the client listen address; "" means the Options' host, else
	// 127.0.0.1 (nats-server itself would bind every interface).
	Host string
	// Port is the client port: 0 means the Options' port, else 4222; -1 a
	// random free port.
	Port int
	// DontListen serves in-process connections only, with no TCP listener.
	DontListen bool

	// HTTPHost is the monitoring listen address; "" means the Options',
	// else DefaultHost (127.0.0.1) whatever the client listen host:
	// monitoring has no authentication, so it reaches the network only
	// when a setting or the file's http says so.
	HTTPHost string
	// HTTPPort is the monitoring port (/varz, /connz, ...): 0 means the
	// Options' (off without them), -1 a random free port, NoMonitoring off.
	HTTPPort int

	// ServerName names the server in cluster and monitoring output; ""
	// means the Options', else the server generates one.
	ServerName string

	// Username and Password, or Token, require clients to authenticate.
	// Connect supplies them for in-process connections.
	Username string
	Password string
	Token    string
	// TLS, when set, requires TLS on client connections.
	TLS *tls.Config

	// ServicePrefix is the first token of Comb's service subjects, which
	// no client may subscribe to once authentication is on (see
	// Denials); "" means protocol.DefaultPrefix.
	ServicePrefix string
	// Trusted names users (by name, or by public key for nkeys) that keep
	// the permissions the configuration gave them, without Denials: a
	// name that matches no configured user is an error.
	Trusted []string

	// Cluster joins other Comb brokers' NATS servers; zero means the
	// Options' cluster, else none.
	Cluster ClusterConfig

	// MaxPayload is the largest message in bytes; 0 means the Options',
	// else DefaultMaxPayload.
	MaxPayload int32
	// MaxPending is how many bytes may queue for one slow client before
	// the server cuts it off; 0 means the Options', else the server
	// default (64 MiB); it is raised to MaxPayload when that is larger.
	MaxPending int64

	// LameDuckDuration is how long LameDuck spreads client disconnects;
	// 0 means the Options', else 10 s. LameDuckGracePeriod is the wait
	// before the first disconnect; 0 means the Options', else 2 s.
	LameDuckDuration    time.Duration
	LameDuckGracePeriod time.Duration

	// ReadyTimeout bounds the wait for the listeners; 0 means 10 s.
	ReadyTimeout time.Duration

	// Logger receives the server's log: notices at Info, debug lines only
	// when it is enabled for Debug. nil discards. The Options' own logging
	// settings (log_file, syslog, ...) are not used.
	Logger *slog.Logger
	// Trace logs every protocol message at Debug-4; only for debugging.
	// The Options' trace turns it on too.
	Trace bool
}

// ClusterConfig joins the embedded server to a NATS cluster. Its fields
// override the Options' cluster where set.
type ClusterConfig struct {
	// Name is the cluster name; every server in a cluster uses the same.
	Name string
	// Host and Port are the route listener; Port 0 means the Options'
	// (none without them), -1 a random free port. Host "" means the
	// Options', else the client listen host.
	Host string
	Port int
	// Routes are the other servers, as nats-route://host:port URLs.
	Routes []string
}

// Server is a running embedded NATS server.
type Server struct {
	ns   *server.Server
	opts *server.Options // as built by Config.options, plus Comb's own user
	cfg  Config
	auth *access // how Comb's own connections authenticate; never logged
	log  *slog.Logger
	once sync.Once
}

// Start starts the server and waits until it accepts connections. It
// fails fast with the server's own message when a listener cannot start
// (a port in use), and after ReadyTimeout otherwise.
func Start(cfg Config) (*Server, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	auth, err := inProcessAuth(opts, cfg.ServicePrefix, cfg.Trusted)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "nats")
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: %w", err)
	}
	adapter := &slogLogger{log: log, fatal: make(chan string, 1)}
	ns.SetLoggerV2(adapter, log.Enabled(context.Background(), slog.LevelDebug), cfg.Trace || opts.Trace, false)
	ns.Start()

	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-adapter.fatal:
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("embeddednats: start: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("embeddednats: not ready for connections after %s", timeout)
		}
	}
	s := &Server{ns: ns, opts: opts, cfg: cfg, auth: auth, log: log}
	attrs := []any{"client_url", s.ClientURL()}
	if opts.DontListen {
		attrs = []any{"client_url", "in-process only"}
	}
	if u := s.MonitorURL(); u != "" {
		attrs = append(attrs, "monitor_url", u)
	}
	if a := ns.ClusterAddr(); a != nil {
		attrs = append(attrs, "cluster_addr", a.String())
	}
	log.Info("nats server ready", attrs...)
	return s, nil
}

// Validate reports what Start would refuse in cfg before the server is
// built: credentials that do not pair, a cluster without a name, a bad
// route URL.
func (cfg Config) Validate() error {
	_, err := cfg.options()
	return err
}

// options builds the server's options: a copy of cfg.Options, the fields
// of cfg where set, then Comb's defaults where neither set a value.
func (cfg Config) options() (*server.Options, error) {
	opts := cfg.Options.Clone()
	if opts == nil {
		opts = &server.Options{}
	}
	setStr := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	setStr(&opts.Host, cfg.Host)
	if opts.Host == "" {
		opts.Host = DefaultHost
	}
	if cfg.Port != 0 {
		opts.Port = cfg.Port
	}
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	opts.DontListen = opts.DontListen || cfg.DontListen
	setStr(&opts.HTTPHost, cfg.HTTPHost)
	if opts.HTTPHost == "" {
		opts.HTTPHost = DefaultHost
	}
	switch cfg.HTTPPort {
	case 0:
	case NoMonitoring:
		opts.HTTPPort, opts.HTTPSPort = 0, 0
	default:
		opts.HTTPPort = cfg.HTTPPort
	}
	setStr(&opts.ServerName, cfg.ServerName)

	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("embeddednats: username and password go together")
	}
	if cfg.Token != "" && cfg.Username != "" {
		return nil, errors.New("embeddednats: use a token or a username, not both")
	}
	setStr(&opts.Username, cfg.Username)
	setStr(&opts.Password, cfg.Password)
	setStr(&opts.Authorization, cfg.Token)
	if cfg.TLS != nil {
		opts.TLS = true
		opts.TLSConfig = cfg.TLS
	}

	if cfg.MaxPayload != 0 {
		opts.MaxPayload = cfg.MaxPayload
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	if cfg.MaxPending != 0 {
		opts.MaxPending = cfg.MaxPending
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxPending < int64(opts.MaxPayload) {
		opts.MaxPending = int64(opts.MaxPayload)
	}
	if cfg.LameDuckDuration != 0 {
		opts.LameDuckDuration = cfg.LameDuckDuration
	}
	if opts.LameDuckDuration == 0 {
		opts.LameDuckDuration = DefaultLameDuckDuration
	}
	if cfg.LameDuckGracePeriod != 0 {
		opts.LameDuckGracePeriod = cfg.LameDuckGracePeriod
	}
	if opts.LameDuckGracePeriod == 0 {
		opts.LameDuckGracePeriod = DefaultLameDuckGracePeriod
	}
	// Comb handles signals itself: the first drains, the second exits.
	opts.NoSigs = true

	c := cfg.Cluster
	setStr(&opts.Cluster.Name, c.Name)
	setStr(&opts.Cluster.Host, c.Host)
	if c.Port != 0 {
		opts.Cluster.Port = c.Port
	}
	if len(c.Routes) > 0 {
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
		if len(opts.Routes) != len(c.Routes) {
			return nil, fmt.Errorf("embeddednats: bad route URL in %q", c.Routes)
		}
	}
	if opts.Cluster.Port != 0 || len(opts.Routes) > 0 {
		if opts.Cluster.Name == "" {
			return nil, errors.New("embeddednats: a cluster needs a name")
		}
		// Like the client listener: loopback unless told otherwise.
		if opts.Cluster.Host == "" {
			opts.Cluster.Host = opts.Host
		}
	}
	return opts, nil
}

// NATS returns the underlying nats-server, for monitoring and tests.
func (s *Server) NATS() *server.Server { return s.ns }

// ClientURL returns the URL TCP clients connect to (nats://host:port), with
// the port actually bound when Port was -1. With DontListen it names no
// reachable listener; use Connect.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// MonitorURL returns the monitoring base URL (http://host:port), or "" when
// monitoring is off.
func (s *Server) MonitorURL() string {
	a := s.ns.MonitorAddr()
	if a == nil {
		return ""
	}
	host := s.opts.HTTPHost
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// Connect returns a client connection that reaches the server in process,
// without TCP, authenticated as Comb's own user in the global account when
// the server requires it. opts come after Comb's own, so they may override
// them. It is ConnectTenant("", opts...).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return s.ConnectTenant("", opts...)
}

// ConnectTenant returns an in-process connection authenticated as Comb's
// own user in the tenant's account ("" is the global account). opts come
// after Comb's own, so they may override them.
func (s *Server) ConnectTenant(tenant string, opts ...nats.Option) (*nats.Conn, error) {
	login, ok := s.auth.logins[tenant]
	if !ok {
		return nil, fmt.Errorf("embeddednats: no tenant %q: the configuration has no account of that name with users", tenant)
	}
	base := append([]nats.Option{nats.InProcessServer(s.ns)}, login...)
	// The URL only names the server: a tls:// one would make the client
	// insist on TLS, which in process only Comb's certificates (see
	// certMinter) need.
	url := "nats://" + strings.TrimPrefix(strings.TrimPrefix(s.ns.ClientURL(), "tls://"), "nats://")
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: connect in process: %w", err)
	}
	return nc, nil
}

// HasInterest reports whether anything in the tenant's account ("" is the
// global account) subscribes to subject, here or across a cluster's
// routes: whether a message published there would reach anyone. An
// unknown tenant is reported as having interest, so that a caller errs
// toward sending.
func (s *Server) HasInterest(tenant, subject string) bool {
	acc := s.ns.GlobalAccount()
	if tenant != "" {
		a, err := s.ns.LookupAccount(tenant)
		if err != nil {
			return true
		}
		acc = a
	}
	return acc.SubscriptionInterest(subject)
}

// Tenants returns the tenants the server serves, sorted: "" for the global
// account ($G) (always present when no account is configured; present when
// some users/nkeys land in $G), and the name of every configured account
// other than the system account that has at least one user or nkey.
func (s *Server) Tenants() []string { return slices.Clone(s.auth.tenants) }

// Shutdown stops the server at once, closing every client connection, and
// waits until it has stopped. It is safe to call twice.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.log.Info("nats server stopped")
	})
}

// LameDuck stops accepting clients, closes the existing ones spread over
// LameDuckDuration so they reconnect elsewhere in a cluster, then shuts the
// server down. It blocks until done. Shutdown after it does nothing.
func (s *Server) LameDuck() {
	s.once.Do(func() {
		s.log.Info("nats server entering lame duck mode", "duration", s.opts.LameDuckDuration)
		s.ns.LameDuckShutdown()
		s.ns.WaitForShutdown()
		s.log.Info("nats server stopped")
	})
}
