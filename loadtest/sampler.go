package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/combmq/comb/internal/procstat"
)

// The sampler reads, once a second:
//
//   - the broker's resident memory and CPU, from /proc/<pid>. The pid is
//     Config.BrokerPID, else the process that listens on the NATS URL's
//     port when that is on this host (found through /proc/net/tcp and the
//     processes' socket descriptors, so it works for `comb serve` without
//     any flag), else the loader itself for the embedded JetStream;
//   - the loader's own CPU, since it shares the machine;
//   - PostgreSQL's CPU: the postmaster named by the data directory's
//     postmaster.pid and its children when Config.PostgresURL is set and
//     the server runs here, else every process named postgres on the host;
//   - with Config.PostgresURL: commits (pg_stat_database.xact_commit over
//     all databases), WAL bytes and syncs (pg_stat_wal), and the size of
//     the URL's database.
//
// A figure it cannot read is NaN, written as an empty CSV cell.

// resourceSample is one second's resource figures; rates are per second
// over the time since the previous sample.
type resourceSample struct {
	BrokerRSS float64 // MB
	BrokerCPU float64 // cores
	LoaderCPU float64 // cores
	PGCPU     float64 // cores
	Commits   float64 // per second
	WALBytes  float64 // MB per second
	WALSyncs  float64 // per second
	DBSize    float64 // MB
}

type sampler struct {
	log        *slog.Logger
	brokerPID  int
	selfPID    int
	pgConn     *pgx.Conn
	postmaster int // 0: every process named postgres

	last     time.Time
	samplePG bool               // the target stores in PostgreSQL
	cpu      map[string]float64 // ticks of the broker and the loader at the last sample
	pgTicks  map[int]float64
	commits  float64
	walBytes float64
	walSyncs float64
	primed   bool
}

func newSampler(ctx context.Context, cfg *Config, target Target, brokerPID int, log *slog.Logger) *sampler {
	s := &sampler{log: log, brokerPID: brokerPID, selfPID: os.Getpid(), samplePG: target == TargetComb, cpu: map[string]float64{}, pgTicks: map[int]float64{}}
	if cfg.BrokerPID > 0 {
		s.brokerPID = cfg.BrokerPID
	}
	if cfg.PostgresURL != "" && s.samplePG {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, cfg.PostgresURL)
		if err != nil {
			log.Warn("loadtest: sampler cannot reach PostgreSQL; its columns stay empty", "err", err)
		} else {
			s.pgConn = conn
			var dir string
			if err := conn.QueryRow(cctx, "SELECT current_setting('data_directory')").Scan(&dir); err == nil {
				s.postmaster = readPostmasterPID(dir)
			}
		}
	}
	s.sample() // prime the counters
	return s
}

func (s *sampler) close() {
	if s.pgConn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.pgConn.Close(ctx)
	}
}

// sample reads the figures; the rates of the first call are NaN.
func (s *sampler) sample() resourceSample {
	now := time.Now()
	dt := now.Sub(s.last).Seconds()
	nan := math.NaN()
	out := resourceSample{BrokerRSS: nan, BrokerCPU: nan, LoaderCPU: nan, PGCPU: nan, Commits: nan, WALBytes: nan, WALSyncs: nan, DBSize: nan}
	rate := func(cur, prev float64) float64 {
		if !s.primed || dt <= 0 || math.IsNaN(cur) || math.IsNaN(prev) {
			return nan
		}
		return (cur - prev) / dt
	}

	procCPU := func(role string, pid int) float64 {
		t, ok := procstat.CPUTicks(pid)
		if !ok {
			delete(s.cpu, role)
			return nan
		}
		prev, had := s.cpu[role]
		s.cpu[role] = t
		if !had {
			return nan
		}
		return rate(t, prev) / procstat.ClockTicks
	}
	if s.brokerPID > 0 {
		out.BrokerCPU = procCPU("broker", s.brokerPID)
		out.BrokerRSS = procstat.RSS(s.brokerPID)
	}
	out.LoaderCPU = procCPU("loader", s.selfPID)
	if s.samplePG {
		out.PGCPU = s.pgCPU(dt)
	}

	if s.pgConn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
		var commits, walBytes, walSyncs, size *float64
		// Through to_jsonb so that a column a PostgreSQL version lacks
		// (wal_sync left pg_stat_wal in 18) reads NULL instead of failing.
		err := s.pgConn.QueryRow(ctx, `SELECT
			(SELECT sum(xact_commit)::float8 FROM pg_stat_database),
			(SELECT (to_jsonb(w)->>'wal_bytes')::float8 FROM pg_stat_wal w),
			(SELECT (to_jsonb(w)->>'wal_sync')::float8 FROM pg_stat_wal w),
			pg_database_size(current_database())::float8`).Scan(&commits, &walBytes, &walSyncs, &size)
		cancel()
		if err != nil {
			s.log.Debug("loadtest: sampler query", "err", err)
		} else {
			get := func(p *float64) float64 {
				if p == nil {
					return nan
				}
				return *p
			}
			c, wb, ws := get(commits), get(walBytes), get(walSyncs)
			out.Commits = rate(c, s.commits)
			out.WALBytes = rate(wb, s.walBytes) / 1e6
			out.WALSyncs = rate(ws, s.walSyncs)
			out.DBSize = get(size) / 1e6
			s.commits, s.walBytes, s.walSyncs = c, wb, ws
		}
	}
	s.last = now
	s.primed = true
	return out
}

// pgCPU sums the CPU of PostgreSQL's processes since the last sample.
// Each process's ticks are compared with its own previous reading, so
// backends that come and go do not skew the sum.
func (s *sampler) pgCPU(dt float64) float64 {
	pids := procstat.PostgresPIDs(s.postmaster)
	if len(pids) == 0 || dt <= 0 {
		return math.NaN()
	}
	total := 0.0
	next := make(map[int]float64, len(pids))
	for _, pid := range pids {
		t, ok := procstat.CPUTicks(pid)
		if !ok {
			continue
		}
		next[pid] = t
		if prev, had := s.pgTicks[pid]; had {
			total += t - prev
		} else if s.primed {
			// Born since the last sample: all its CPU is recent.
			total += t
		}
	}
	s.pgTicks = next
	if !s.primed {
		return math.NaN()
	}
	return total / procstat.ClockTicks / dt
}

// readPostmasterPID reads the first line of a data directory's
// postmaster.pid, 0 when it cannot.
func readPostmasterPID(dir string) int {
	f, err := os.Open(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
	if err != nil {
		return 0
	}
	return pid
}

// listenerPID finds the process on this host that listens on the TCP port
// of a nats:// URL, 0 when the URL is not local or nothing is found.
func listenerPID(natsURL string) int {
	u, err := url.Parse(natsURL)
	if err != nil {
		return 0
	}
	host, portStr := u.Hostname(), u.Port()
	if portStr == "" {
		portStr = "4222"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || !isLocalHost(host) {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for inode := range listeningInodes(f, port) {
			inodes[inode] = true
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				pid, _ := strconv.Atoi(e.Name())
				return pid
			}
		}
	}
	return 0
}

// listeningInodes returns the socket inodes of a /proc/net/tcp file that
// listen on port.
func listeningInodes(file string, port int) map[string]bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	want := fmt.Sprintf(":%04X", port)
	out := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out[f[9]] = true
	}
	return out
}

func isLocalHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		addrs, err := net.LookupIP(host)
		if err != nil || len(addrs) == 0 {
			return false
		}
		ip = addrs[0]
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
