// Package pgcluster runs a private PostgreSQL cluster from the local
// installation: initdb on first use, the server as a child process on
// loopback, a clean stop, and the restarts that fault tests need.
//
// When the calling process is root, every PostgreSQL program runs as the
// `postgres` OS user, because PostgreSQL refuses to run as root.
//
// The cluster is Comb's alone: every connection, over TCP on 127.0.0.1 or
// over the Unix socket inside the 0700 data directory, must give the
// superuser's password (scram-sha-256; pg_hba.conf has no trust line). The
// password is random, made at initdb, and kept in PasswordFile, mode 0600
// inside the data directory, so only the OS user that runs the server (and
// root) can read it. A data directory made by an earlier Comb with trust
// authentication gets a password and the new pg_hba.conf on its next start.
package pgcluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/combmq/comb/internal/freeport"
	"github.com/jackc/pgx/v5"
)

// Options configure a cluster. Dir is required; the rest may be zero.
type Options struct {
	// Dir is the data directory. It is created and initialised with initdb
	// when it holds no PG_VERSION, and reused as it is otherwise.
	Dir string
	// Port is the loopback TCP port; 0 picks a free one.
	Port int
	// Settings are extra server settings, passed as `-c name=value`.
	// DurableSettings and TestSettings are the two usual sets.
	Settings map[string]string
	// Database is created when missing and named by URL; "" means "comb".
	Database string
	// BinDir overrides FindBinDir.
	BinDir string
	// StartTimeout bounds the wait for the server to accept connections,
	// which after a crash includes WAL replay; 0 means 5 minutes.
	StartTimeout time.Duration
	// Logger receives what the cluster does; nil discards.
	Logger *slog.Logger
}

// DurableSettings returns the settings `comb serve` runs its private
// cluster with: every commit durable, plus room for a write-heavy load.
// wal_compression falls back to off when the server lacks lz4.
func DurableSettings() map[string]string {
	return map[string]string{
		"fsync":              "on",
		"synchronous_commit": "on",
		"full_page_writes":   "on",
		// Small on purpose. PostgreSQL 15 extends a table by writing
		// zero pages into the kernel's cache, and those stay dirty until
		// their buffer is evicted and written with backend_flush_after's
		// hint: the kernel holds about shared_buffers of dirty pages, and
		// every ~30 s (vm.dirty_expire_centisecs) writes a file's all at
		// once, WAL fsyncs queued behind it. At 80k msg/s open loop, 256MB
		// gave one second of 145-239 ms e2e p99 in each 60 s run (p99.9
		// 146-177 ms); 64MB none over 53 ms (p99.9 34-53 ms), and the
		// closed loop the same within noise (docs/benchmarks.md).
		"shared_buffers":     "64MB",
		"max_wal_size":       "4GB",
		"checkpoint_timeout": "15min",
		"max_connections":    "200",
		"wal_compression":    "lz4",
		// Backends that evict dirty buffers ask the kernel to write them
		// out as they go. Without it the kernel writes ~30 s of a log's
		// data at once (vm.dirty_expire_centisecs), and WAL fsyncs queue
		// behind that burst: measured at 60k msg/s, p99 144 -> 82 ms and
		// p99.9 481 -> 196 ms, with latency spikes every 30 s gone.
		"backend_flush_after": "512kB",
		// A new WAL file is not written full of zeros first. Until the
		// first checkpoint recycles old files (4 GB or 15 min away) every
		// 16 MB of WAL is a new file, and zero-filling one doubled the
		// log's writes while commits waited on WALWrite: at 80k msg/s
		// open loop, 60 s runs on a fresh cluster went from e2e p99
		// near 25 ms to near 85 ms partway through, four runs in four;
		// with it off none did (p99 34-45 against 74-85 ms). The zeros
		// only reserve disk space ahead (PostgreSQL's docs); a full disk
		// then stops PostgreSQL at a WAL write instead of at a file's
		// creation.
		"wal_init_zero": "off",
		// A vacuum of the cold segments or of comb_dedup keeps more
		// dead rows per index pass (docs/operations.md).
		"autovacuum_work_mem": "128MB",
	}
}

// TestSettings returns settings for throwaway test clusters: fast and not
// crash safe (sessions that set synchronous_commit on, as the store does,
// still survive an immediate restart). Never use them for data anyone
// keeps. Connections are plentiful because parallel tests each open pools.
func TestSettings() map[string]string {
	return map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		"max_connections":    "300",
	}
}

// Cluster is a running (or stopped) private PostgreSQL cluster. Its methods
// are safe for concurrent use.
type Cluster struct {
	dir      string
	bin      string
	port     int
	db       string
	settings map[string]string
	cred     *syscall.Credential // nil: run as the current user
	created  bool
	timeout  time.Duration
	log      *slog.Logger
	logPath  string
	password string // the superuser's, from PasswordFile

	mu   sync.Mutex
	proc *server // nil when stopped
}

// server is one run of the postmaster.
type server struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // exit status, valid after done
	logFile *os.File
	logFrom int64 // log size when this run started, to quote its lines
}

// Start prepares opts.Dir (initdb when new, a stale server from a crashed
// run stopped), starts PostgreSQL listening on 127.0.0.1 and waits until it
// accepts connections, then creates the database when missing.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	if err := c.prepare(ctx); err != nil {
		return nil, err
	}
	if err := c.launchPicking(ctx, opts.Port == 0); err != nil {
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	// The URL that names the password file instead of holding the
	// password: safe to log, and what psql or `comb loadtest -postgres-url`
	// can use as it is (by a user allowed to read the file).
	c.log.Info("postgresql ready", "addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		"database", c.db, "dir", c.dir, "log", c.logPath, "password_file", c.PasswordFile(),
		"connect", c.PassfileURL())
	return c, nil
}

func newCluster(opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("pgcluster: no data directory given")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: data directory: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bin := opts.BinDir
	if bin == "" {
		if bin, err = FindBinDir(); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}
	c := &Cluster{
		dir:      dir,
		bin:      bin,
		port:     opts.Port,
		db:       opts.Database,
		settings: map[string]string{},
		timeout:  opts.StartTimeout,
		log:      log.With("component", "pgcluster"),
		logPath:  filepath.Join(dir, "postgres.log"),
	}
	if c.db == "" {
		c.db = "comb"
	}
	if c.timeout == 0 {
		c.timeout = 5 * time.Minute
	}
	for k, v := range opts.Settings {
		c.settings[k] = v
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgcluster: running as root, PostgreSQL must run as the `postgres` OS user, "+
				"which is missing (apt-get install postgresql creates it): %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	return c, nil
}

// URL returns the connection URL of the cluster's database, with the
// superuser's password in it: pass it to pgx, never to a log (PassfileURL
// is the one to show).
func (c *Cluster) URL() string { return c.urlFor(c.db) }

func (c *Cluster) urlFor(db string) string {
	return clusterURL(c.port, db, url.UserPassword(superuser, c.password), nil)
}

// PassfileURL returns a connection URL of the cluster's database that
// holds no password but names PasswordFile (libpq's and pgx's passfile
// parameter), so it is safe to log and still connects for whoever may
// read the file: root, and the OS user that runs the server.
func (c *Cluster) PassfileURL() string {
	return clusterURL(c.port, c.db, url.User(superuser), url.Values{"passfile": {c.PasswordFile()}})
}

func clusterURL(port int, db string, user *url.Userinfo, q url.Values) string {
	if q == nil {
		q = url.Values{}
	}
	q.Set("sslmode", "disable")
	// A '/' may stand unescaped in a query: the passfile path stays legible.
	u := url.URL{Scheme: "postgres", User: user, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path: "/" + db, RawQuery: strings.ReplaceAll(q.Encode(), "%2F", "/")}
	return u.String()
}

// PasswordFile returns the file that holds the superuser's password, in
// the data directory.
func (c *Cluster) PasswordFile() string { return filepath.Join(c.dir, PasswordFileName) }

// Port returns the TCP port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

// Dir returns the absolute data directory.
func (c *Cluster) Dir() string { return c.dir }

// Created reports whether Start ran initdb, as opposed to reusing Dir.
func (c *Cluster) Created() bool { return c.created }

// LogPath returns the file the server writes its log to.
func (c *Cluster) LogPath() string { return c.logPath }

// prepare creates or checks the data directory and clears a stale server.
func (c *Cluster) prepare(ctx context.Context) error {
	if err := c.prepareDirs(); err != nil {
		return err
	}
	ver, err := os.ReadFile(filepath.Join(c.dir, "PG_VERSION"))
	switch {
	case err == nil:
		if err := c.matchVersion(strings.TrimSpace(string(ver))); err != nil {
			return err
		}
		c.log.Info("reusing PostgreSQL data directory", "dir", c.dir, "version", strings.TrimSpace(string(ver)))
	case errors.Is(err, os.ErrNotExist):
		if err := c.initdb(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("pgcluster: read PG_VERSION: %w", err)
	}
	if err := c.clearStale(); err != nil {
		return err
	}
	if err := c.ensurePassword(ctx); err != nil {
		return err
	}
	if err := c.writeHBA(); err != nil {
		return err
	}
	return c.checkSettings(ctx)
}

// prepareDirs makes Dir exist with the owner and mode PostgreSQL demands,
// under parents its OS user can traverse.
func (c *Cluster) prepareDirs() error {
	if err := os.MkdirAll(filepath.Dir(c.dir), 0o755); err != nil {
		return fmt.Errorf("pgcluster: create parent of data directory: %w", err)
	}
	if err := os.Mkdir(c.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("pgcluster: create data directory: %w", err)
	}
	if c.cred != nil {
		if err := c.makeTraversable(filepath.Dir(c.dir)); err != nil {
			return err
		}
		if err := chownTree(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: give data directory to postgres: %w", err)
		}
	}
	st, err := os.Stat(c.dir)
	if err != nil {
		return fmt.Errorf("pgcluster: data directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("pgcluster: data directory %s is not a directory", c.dir)
	}
	if perm := st.Mode().Perm(); perm != 0o700 && perm != 0o750 {
		if err := os.Chmod(c.dir, 0o700); err != nil {
			return fmt.Errorf("pgcluster: data directory mode: %w", err)
		}
	}
	return nil
}

// makeTraversable grants search permission to others on every ancestor of
// dir that the postgres user could not otherwise pass (a root-owned 0700
// temporary or home directory), and says so: without it the server cannot
// reach its data directory at all.
func (c *Cluster) makeTraversable(dir string) error {
	uid, gid := c.cred.Uid, c.cred.Gid
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		mode := st.Mode().Perm()
		ok = ok && (mode&0o001 != 0 ||
			(sys.Uid == uid && mode&0o100 != 0) ||
			(sys.Gid == gid && mode&0o010 != 0))
		if !ok {
			if err := os.Chmod(d, st.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("pgcluster: let the postgres user reach %s: %w", d, err)
			}
			c.log.Warn("granted others search permission so the postgres OS user can reach the data directory",
				"path", d, "old_mode", fmt.Sprintf("%#o", mode))
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}

func chownTree(dir string, uid, gid int) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) == uid && int(sys.Gid) == gid {
		return nil // already owned: do not walk a large data directory
	}
	return filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func (c *Cluster) matchVersion(dataMajor string) error {
	binMajor, err := serverMajor(c.bin)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if binMajor == dataMajor {
		return nil
	}
	if dir := binDirForMajor(dataMajor); dir != "" {
		c.log.Info("using the binaries that match the data directory", "version", dataMajor, "bin", dir)
		c.bin = dir
		return nil
	}
	return fmt.Errorf("pgcluster: data directory %s was made by PostgreSQL %s but the binaries in %s are version %s: "+
		"install PostgreSQL %s, or use another data directory", c.dir, dataMajor, c.bin, binMajor, dataMajor)
}

// initdb creates the cluster with a fresh random superuser password and
// password authentication for every connection, then keeps the password in
// PasswordFile.
func (c *Cluster) initdb(ctx context.Context) error {
	pw, err := newPassword()
	if err != nil {
		return err
	}
	// initdb reads the password from a file (a pipe's /dev/stdin is not
	// the postgres user's to open), and wants the data directory empty:
	// the file lives in a 0700 directory beside it for the run.
	tmp, err := os.MkdirTemp(filepath.Dir(c.dir), ".comb-initdb-")
	if err != nil {
		return fmt.Errorf("pgcluster: initdb password file: %w", err)
	}
	defer os.RemoveAll(tmp)
	pwFile := filepath.Join(tmp, "pw")
	if err := c.writePrivate(pwFile, []byte(pw+"\n")); err != nil {
		return fmt.Errorf("pgcluster: initdb password file: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(tmp, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: initdb password file: %w", err)
		}
	}
	args := []string{"-D", c.dir, "-U", superuser, "--auth=scram-sha-256", "--pwfile=" + pwFile,
		"-E", "UTF8", "--locale=C"}
	if c.settings["fsync"] == "off" {
		args = append(args, "--no-sync") // a throwaway cluster need not survive a power cut
	}
	start := time.Now()
	out, err := combinedOutput(c.tool(ctx, "initdb", args...))
	if err != nil {
		return fmt.Errorf("pgcluster: initdb %s: %w\n%s", c.dir, err, lastLines(out, 20))
	}
	// A crash before this line leaves a cluster without PasswordFile:
	// the next start gives it a new password (ensurePassword).
	if err := c.savePassword(pw); err != nil {
		return err
	}
	c.created = true
	c.log.Info("initialized a new PostgreSQL cluster", "dir", c.dir, "bin", c.bin,
		"password_file", c.PasswordFile(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// superuser is the role Comb connects as: the one initdb creates.
const superuser = "postgres"

// PasswordFileName is the file in the data directory that holds the
// superuser's password, mode 0600, in the .pgpass format libpq and pgx
// read (`*:*:*:postgres:<password>`), so that PGPASSFILE or a URL's
// passfile parameter can name it.
const PasswordFileName = "comb-password"

// newPassword returns 192 random bits in hex: nothing to escape in a URL,
// a .pgpass line or an SQL literal.
func newPassword() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("pgcluster: generate a password: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// savePassword writes pw to PasswordFile, atomically, and remembers it.
func (c *Cluster) savePassword(pw string) error {
	path := c.PasswordFile()
	tmp := path + ".tmp"
	if err := c.writePrivate(tmp, []byte("*:*:*:"+superuser+":"+pw+"\n")); err != nil {
		return fmt.Errorf("pgcluster: write password file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pgcluster: write password file: %w", err)
	}
	c.password = pw
	return nil
}

// writePrivate writes a 0600 file, synced, owned by the server's OS user.
func (c *Cluster) writePrivate(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600) // whatever the umask or an earlier file said
	}
	if err == nil && c.cred != nil {
		err = f.Chown(int(c.cred.Uid), int(c.cred.Gid))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadPassword returns the superuser's password kept in a cluster's data
// directory dir.
func ReadPassword(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, PasswordFileName))
	if err != nil {
		return "", fmt.Errorf("pgcluster: read password: %w", err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	fields := strings.SplitN(line, ":", 5)
	if len(fields) != 5 || fields[3] != superuser || fields[4] == "" {
		return "", fmt.Errorf("pgcluster: password file %s: want one line *:*:*:%s:<password>",
			filepath.Join(dir, PasswordFileName), superuser)
	}
	return fields[4], nil
}

// URLFromDir returns the connection URL, password included, of the
// cluster running on data directory dir, for a program that was given the
// directory rather than a URL (`comb loadtest -data-dir`): the port comes
// from postmaster.pid, the password from PasswordFile. db "" means "comb".
func URLFromDir(dir, db string) (string, error) {
	if db == "" {
		db = "comb"
	}
	pw, err := ReadPassword(dir)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return "", fmt.Errorf("pgcluster: is PostgreSQL running on %s? %w", dir, err)
	}
	// Line 4 of postmaster.pid is the port.
	lines := strings.Split(string(b), "\n")
	port := 0
	if len(lines) >= 4 {
		port, _ = strconv.Atoi(strings.TrimSpace(lines[3]))
	}
	if port <= 0 {
		return "", fmt.Errorf("pgcluster: %s: no port in postmaster.pid", dir)
	}
	return clusterURL(port, db, url.UserPassword(superuser, pw), nil), nil
}

// ensurePassword loads the superuser's password from PasswordFile. A data
// directory without one (made by a Comb that trusted local connections,
// or one that crashed between initdb and saving the password) gets a new
// password, set in single-user mode: the server is not running (clearStale
// came first) and single-user mode opens no socket, so no connection can
// slip in while pg_hba.conf may still say trust.
func (c *Cluster) ensurePassword(ctx context.Context) error {
	pw, err := ReadPassword(c.dir)
	if err == nil {
		c.password = pw
		return nil
	}
	if _, serr := os.Stat(c.PasswordFile()); !errors.Is(serr, os.ErrNotExist) {
		return err // there but unreadable or malformed: do not overwrite
	}
	if pw, err = newPassword(); err != nil {
		return err
	}
	cmd := c.tool(ctx, "postgres", "--single", "-D", c.dir,
		"-c", "listen_addresses=", "-c", "unix_socket_directories=",
		"-c", "password_encryption=scram-sha-256", "-c", "log_statement=none", superuser)
	// On stdin, not in argv, which other users can read in /proc.
	cmd.Stdin = strings.NewReader("ALTER ROLE " + superuser + " PASSWORD '" + pw + "';\n")
	out, err := combinedOutput(cmd)
	if err == nil && (bytes.Contains(out, []byte("ERROR:")) || bytes.Contains(out, []byte("FATAL:"))) {
		err = errors.New("the statement failed") // single-user mode exits 0 after a failed statement
	}
	if err != nil {
		return fmt.Errorf("pgcluster: set a password on %s (single-user mode): %w\n%s", c.dir, err, lastLines(out, 20))
	}
	if err := c.savePassword(pw); err != nil {
		return err
	}
	c.log.Warn("the PostgreSQL data directory had no password (made by an earlier Comb that trusted local connections): "+
		"set a new superuser password", "dir", c.dir, "password_file", c.PasswordFile())
	return nil
}

// hbaConf is the whole of the cluster's pg_hba.conf: a password for every
// connection, local socket and loopback TCP, replication included.
const hbaConf = `# Written by Comb (internal/pgcluster) at every start; edits are replaced.
# Every connection must give the superuser's password (scram-sha-256),
# which is in the file comb-password in this directory (mode 0600).
# TYPE  DATABASE        USER            ADDRESS                 METHOD
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
`

// writeHBA makes pg_hba.conf say hbaConf, replacing an earlier Comb's
// trust lines (or any edit: the cluster is Comb's alone).
func (c *Cluster) writeHBA() error {
	path := filepath.Join(c.dir, "pg_hba.conf")
	old, err := os.ReadFile(path)
	if err == nil && string(old) == hbaConf {
		return nil
	}
	tmp := path + ".tmp"
	if err := c.writePrivate(tmp, []byte(hbaConf)); err != nil {
		return fmt.Errorf("pgcluster: write pg_hba.conf: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pgcluster: write pg_hba.conf: %w", err)
	}
	if hbaTrusts(old) {
		c.log.Warn("replaced pg_hba.conf, which trusted local connections: a password is now required",
			"path", path)
	} else {
		c.log.Info("wrote pg_hba.conf: a password is required for every connection", "path", path)
	}
	return nil
}

// hbaTrusts reports whether a pg_hba.conf has a line with the trust method.
func hbaTrusts(conf []byte) bool {
	for line := range strings.SplitSeq(string(conf), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) >= 4 && slices.Contains(f[3:], "trust") {
			return true
		}
	}
	return false
}

// tool returns a command for a PostgreSQL program, run as the right user
// with an environment free of the caller's PG* variables.
// combinedOutput runs a command that c.tool made and returns its output.
// The tool's parent-death signal fires when the thread that forked it
// exits, not the process (as for the server, see start): it runs from a
// goroutine locked to its thread until the tool has exited, and unlocked
// then: a goroutine that ends locked makes the runtime retire its thread,
// which kills every other child that thread forked with a parent-death
// signal. Unlocked while it ran, a fork from a thread that the runtime
// retired meanwhile (a locked goroutine ended on it) got SIGKILL: a local
// CI run saw pg_ctl promote end "signal: killed" with nothing else that
// sends it one.
func combinedOutput(cmd *exec.Cmd) ([]byte, error) {
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		out, err := cmd.CombinedOutput()
		done <- result{out, err}
	}()
	r := <-done
	return r.out, r.err
}

func (c *Cluster) tool(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = "/" // a directory the postgres user can always enter
	cmd.Env = serverEnv()
	cmd.SysProcAttr = toolProcAttr(c.cred)
	return cmd
}

func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// checkSettings replaces wal_compression with off when the server cannot
// use the method asked for (lz4 needs PostgreSQL 15 built with lz4).
func (c *Cluster) checkSettings(ctx context.Context) error {
	v, ok := c.settings["wal_compression"]
	if !ok || v == "off" {
		return nil
	}
	out, err := combinedOutput(c.tool(ctx, "postgres", "-D", c.dir, "-C", "wal_compression", "-c", "wal_compression="+v))
	if err != nil {
		c.log.Warn("wal_compression not supported by this PostgreSQL, using off", "wanted", v,
			"detail", strings.TrimSpace(string(lastLines(out, 2))))
		c.settings["wal_compression"] = "off"
	}
	return nil
}

// clearStale stops a server that a crashed earlier run left on this data
// directory and removes its lock file, so the new server can start.
func (c *Cluster) clearStale() error {
	pids := serverProcesses(c.dir)
	if len(pids) > 0 {
		c.log.Warn("stopping a stale PostgreSQL server left on the data directory by an earlier run",
			"dir", c.dir, "pids", pids)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown
		}
		if !waitGone(pids, 10*time.Second) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if !waitGone(pids, 5*time.Second) {
				return fmt.Errorf("pgcluster: stale PostgreSQL processes %v on %s do not exit", pids, c.dir)
			}
		}
	}
	if runtime.GOOS != "linux" {
		return nil // no way to see whose the lock file is: let PostgreSQL judge it
	}
	// No process serves this directory (checked above), so a lock file is
	// stale even if its PID now belongs to some other process, which would
	// make PostgreSQL refuse to start.
	pidFile := filepath.Join(c.dir, "postmaster.pid")
	if err := os.Remove(pidFile); err == nil {
		c.log.Info("removed a stale postmaster.pid", "dir", c.dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgcluster: remove stale postmaster.pid: %w", err)
	}
	return nil
}

func waitGone(pids []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := false
		for _, pid := range pids {
			if alive(pid) {
				left = true
				break
			}
		}
		if !left {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // polling a foreign process: there is nothing to wait on
	}
}

// launchPicking launches the server; when the port was picked at random and
// someone else took it in between, it tries another one a few times.
func (c *Cluster) launchPicking(ctx context.Context, pick bool) error {
	for attempt := 1; ; attempt++ {
		if pick {
			p, err := freeport.Loopback()
			if err != nil {
				return fmt.Errorf("pgcluster: pick a port: %w", err)
			}
			c.port = p
		}
		err := c.launch(ctx)
		if err == nil || !pick || attempt == 3 || !errors.Is(err, ErrPortInUse) {
			return err
		}
		c.log.Info("port taken meanwhile, trying another", "port", c.port)
	}
}

// ErrPortInUse means the server could not bind its port: another process
// holds it. Start returns it wrapped when a fixed Options.Port is taken.
var ErrPortInUse = errors.New("port in use")

// socketDir is the data directory when a socket path there fits the kernel's
// limit; "" (no Unix socket, TCP only) otherwise.
func (c *Cluster) socketDir() string {
	if len(c.dir)+len("/.s.PGSQL.65535") >= 100 {
		return ""
	}
	return c.dir
}

func (c *Cluster) serverArgs() []string {
	args := []string{"-D", c.dir, "-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=127.0.0.1",
		// The socket is in the 0700 data directory, and the socket file
		// itself is the owner's alone, as a second fence.
		"-c", "unix_socket_directories=" + c.socketDir(),
		"-c", "unix_socket_permissions=0700",
		// The rules writeHBA wrote, whatever postgresql.conf says.
		"-c", "hba_file=" + filepath.Join(c.dir, "pg_hba.conf"),
	}
	keys := make([]string, 0, len(c.settings))
	for k := range c.settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+c.settings[k])
	}
	return args
}

// launch starts the postmaster and waits until it accepts connections.
func (c *Cluster) launch(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return nil
	}
	c.rotateLog()
	lf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("pgcluster: open server log: %w", err)
	}
	if c.cred != nil {
		// The server's own user must read its data directory whole,
		// as pg_basebackup does through it.
		if err := lf.Chown(int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			_ = lf.Close()
			return fmt.Errorf("pgcluster: server log owner: %w", err)
		}
	}
	from, _ := lf.Seek(0, io.SeekEnd)
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), c.serverArgs()...)
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = serverProcAttr(c.cred)
	s := &server{cmd: cmd, done: make(chan struct{}), logFile: lf, logFrom: from}

	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked the
		// server exits, not the process. Keep this goroutine on its
		// thread until the server exits, then let the thread go back to
		// the runtime: a goroutine that ends locked makes the runtime
		// retire its thread, and with it every other child that thread
		// forked earlier with a parent-death signal (a test's `comb
		// serve` got SIGKILL when the test stopped PostgreSQL).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.err = cmd.Wait()
		_ = lf.Close()
		close(s.done)
	}()
	if err := <-started; err != nil {
		_ = lf.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	if err := c.waitReady(ctx, s); err != nil {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-s.done
		return err
	}
	c.proc = s
	c.log.Debug("postgres started", "pid", cmd.Process.Pid, "port", c.port)
	return nil
}

// waitReady polls postmaster.pid until the server says "ready" (or
// "standby"): PostgreSQL
// writes its status there, which is what pg_ctl -w waits on too.
func (c *Cluster) waitReady(ctx context.Context, s *server) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	pidFile := filepath.Join(c.dir, "postmaster.pid")
	want := strconv.Itoa(s.cmd.Process.Pid)
	for {
		select {
		case <-s.done:
			tail := c.logSince(s.logFrom)
			err := fmt.Errorf("pgcluster: postgres exited during startup (%v); its log says:\n%s", s.err, tail)
			if bytes.Contains(tail, []byte("could not bind")) || bytes.Contains(tail, []byte("already in use")) {
				err = fmt.Errorf("%w: %w", ErrPortInUse, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: postgres not ready: %w; its log says:\n%s", ctx.Err(), c.logSince(s.logFrom))
		case <-tick.C:
			b, err := os.ReadFile(pidFile)
			if err != nil {
				continue
			}
			lines := strings.Split(string(b), "\n")
			// A hot standby says "standby" once it accepts read-only
			// connections.
			if len(lines) >= 8 && strings.TrimSpace(lines[0]) == want &&
				(strings.TrimSpace(lines[7]) == "ready" || strings.TrimSpace(lines[7]) == "standby") {
				return nil
			}
		}
	}
}

// rotateLog keeps one old server log once the current one passes 64 MiB,
// so a long-lived data directory does not fill the disk with logs.
func (c *Cluster) rotateLog() {
	if st, err := os.Stat(c.logPath); err == nil && st.Size() > 64<<20 {
		_ = os.Rename(c.logPath, c.logPath+".1")
	}
}

// logSince returns the last lines the server logged since offset.
func (c *Cluster) logSince(offset int64) []byte {
	f, err := os.Open(c.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return lastLines(b, 20)
}

func lastLines(b []byte, n int) []byte {
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

func (c *Cluster) ensureDatabase(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.urlFor("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, c.db).Scan(&exists); err != nil {
		return fmt.Errorf("pgcluster: look up database: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.db}.Sanitize()); err != nil {
		return fmt.Errorf("pgcluster: create database %s: %w", c.db, err)
	}
	c.log.Info("created database", "database", c.db)
	return nil
}

// Stop shuts the server down in fast mode: open transactions roll back,
// sessions end, and a checkpoint makes the next start quick. It waits for
// the server to exit. It is safe to call twice, and on a stopped cluster.
func (c *Cluster) Stop() error {
	return c.stop(syscall.SIGINT, time.Minute)
}

// Kill stops the server in immediate mode, like a crash: no checkpoint, the
// next start replays WAL. Fault tests use it.
func (c *Cluster) Kill() error {
	return c.stop(syscall.SIGQUIT, 10*time.Second)
}

// Restart stops the server (immediate mode when immediate is true, for
// fault tests; fast otherwise) and starts it again on the same port.
func (c *Cluster) Restart(ctx context.Context, immediate bool) error {
	var err error
	if immediate {
		err = c.Kill()
	} else {
		err = c.Stop()
	}
	if err != nil {
		return err
	}
	return c.Start(ctx)
}

// Start starts a stopped cluster again, on the same port and with the same
// settings. It does nothing when the server is running.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	running := c.proc != nil
	c.mu.Unlock()
	if running {
		return nil
	}
	if err := c.clearStale(); err != nil {
		return err
	}
	return c.launch(ctx)
}

// stop signals the postmaster and waits up to grace for it to exit, then
// escalates to an immediate shutdown and finally SIGKILL.
func (c *Cluster) stop(sig syscall.Signal, grace time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.proc
	if s == nil {
		return nil
	}
	c.proc = nil
	p := s.cmd.Process
	_ = p.Signal(sig)
	for _, step := range []struct {
		wait time.Duration
		next syscall.Signal
	}{{grace, syscall.SIGQUIT}, {10 * time.Second, syscall.SIGKILL}, {10 * time.Second, 0}} {
		t := time.NewTimer(step.wait)
		select {
		case <-s.done:
			t.Stop()
			c.log.Debug("postgres stopped", "pid", p.Pid, "mode", modeName(sig))
			return nil
		case <-t.C:
		}
		if step.next == 0 {
			break
		}
		c.log.Warn("postgres slow to stop, escalating", "pid", p.Pid, "signal", step.next)
		_ = p.Signal(step.next)
	}
	return fmt.Errorf("pgcluster: postgres (pid %d) did not exit", p.Pid)
}

func modeName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "fast"
	case syscall.SIGQUIT:
		return "immediate"
	}
	return sig.String()
}
