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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultMaxPayload is the largest message the server accepts unless
// Config.MaxPayload says otherwise: 8 MiB, so a 1 MiB message still fits
// after base64 and a JSON envelope.
const DefaultMaxPayload = 8 << 20

// Config configures the embedded server. The zero value listens on
// 127.0.0.1:4222 with monitoring off.
type Config struct {
	// Host is the client listen address; "" means 127.0.0.1.
	Host string
	// Port is the client port: 0 means 4222, -1 a random free port.
	Port int
	// DontListen serves in-process connections only, with no TCP listener.
	DontListen bool

	// HTTPHost is the monitoring listen address; "" means Host.
	HTTPHost string
	// HTTPPort is the monitoring port (/varz, /connz, ...): 0 means off,
	// -1 a random free port.
	HTTPPort int

	// ServerName names the server in cluster and monitoring output; ""
	// lets the server generate one.
	ServerName string

	// Username and Password, or Token, require clients to authenticate.
	// Connect supplies them for in-process connections.
	Username string
	Password string
	Token    string
	// TLS, when set, requires TLS on client connections.
	TLS *tls.Config

	// Cluster joins other Comb brokers' NATS servers; zero means no cluster.
	Cluster ClusterConfig

	// MaxPayload is the largest message in bytes; 0 means DefaultMaxPayload.
	MaxPayload int32
	// MaxPending is how many bytes may queue for one slow client before
	// the server cuts it off; 0 means the server default (64 MiB), raised
	// to MaxPayload when that is larger.
	MaxPending int64

	// LameDuckDuration is how long LameDuck spreads client disconnects;
	// 0 means 10 s. LameDuckGracePeriod is the wait before the first
	// disconnect; 0 means 2 s.
	LameDuckDuration    time.Duration
	LameDuckGracePeriod time.Duration

	// ReadyTimeout bounds the wait for the listeners; 0 means 10 s.
	ReadyTimeout time.Duration

	// Logger receives the server's log: notices at Info, debug lines only
	// when it is enabled for Debug. nil discards.
	Logger *slog.Logger
	// Trace logs every protocol message at Debug-4; only for debugging.
	Trace bool
}

// ClusterConfig joins the embedded server to a NATS cluster.
type ClusterConfig struct {
	// Name is the cluster name; every server in a cluster uses the same.
	Name string
	// Host and Port are the route listener; Port 0 means no cluster
	// listener, -1 a random free port.
	Host string
	Port int
	// Routes are the other servers, as nats-route://host:port URLs.
	Routes []string
}

// Server is a running embedded NATS server.
type Server struct {
	ns   *server.Server
	opts *server.Options // as built by Config.options
	cfg  Config
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
	ns.SetLoggerV2(adapter, log.Enabled(context.Background(), slog.LevelDebug), cfg.Trace, false)
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
	s := &Server{ns: ns, opts: opts, cfg: cfg, log: log}
	attrs := []any{"client_url", s.ClientURL()}
	if cfg.DontListen {
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

func (cfg Config) options() (*server.Options, error) {
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	opts := &server.Options{
		ServerName:          cfg.ServerName,
		Host:                host,
		Port:                cfg.Port,
		DontListen:          cfg.DontListen,
		HTTPHost:            cfg.HTTPHost,
		HTTPPort:            cfg.HTTPPort,
		Username:            cfg.Username,
		Password:            cfg.Password,
		Authorization:       cfg.Token,
		MaxPayload:          cfg.MaxPayload,
		MaxPending:          cfg.MaxPending,
		LameDuckDuration:    cfg.LameDuckDuration,
		LameDuckGracePeriod: cfg.LameDuckGracePeriod,
		// Comb handles signals itself: the first drains, the second exits.
		NoSigs: true,
	}
	if opts.Port == 0 {
		opts.Port = server.DEFAULT_PORT
	}
	if opts.HTTPHost == "" {
		opts.HTTPHost = host
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = server.MAX_PENDING_SIZE
	}
	if opts.MaxPending < int64(opts.MaxPayload) {
		opts.MaxPending = int64(opts.MaxPayload)
	}
	if opts.LameDuckDuration == 0 {
		opts.LameDuckDuration = 10 * time.Second
	}
	if opts.LameDuckGracePeriod == 0 {
		opts.LameDuckGracePeriod = 2 * time.Second
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("embeddednats: username and password go together")
	}
	if cfg.Token != "" && cfg.Username != "" {
		return nil, errors.New("embeddednats: use a token or a username, not both")
	}
	if cfg.TLS != nil {
		opts.TLS = true
		opts.TLSConfig = cfg.TLS
	}
	if c := cfg.Cluster; c.Port != 0 || len(c.Routes) > 0 {
		if c.Name == "" {
			return nil, errors.New("embeddednats: a cluster needs a name")
		}
		opts.Cluster.Name = c.Name
		opts.Cluster.Host = c.Host
		if opts.Cluster.Host == "" {
			opts.Cluster.Host = host
		}
		opts.Cluster.Port = c.Port
		if len(c.Routes) > 0 {
			opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
			if len(opts.Routes) != len(c.Routes) {
				return nil, fmt.Errorf("embeddednats: bad route URL in %q", c.Routes)
			}
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
// without TCP, authenticated when the server requires it. opts come after
// Comb's own, so they may override them.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.InProcessServer(s.ns)}
	if s.cfg.Username != "" {
		base = append(base, nats.UserInfo(s.cfg.Username, s.cfg.Password))
	}
	if s.cfg.Token != "" {
		base = append(base, nats.Token(s.cfg.Token))
	}
	nc, err := nats.Connect(s.ns.ClientURL(), append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: connect in process: %w", err)
	}
	return nc, nil
}

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
