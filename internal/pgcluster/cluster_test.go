package pgcluster

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("PGCLUSTER_TEST_OWNER_DIR"); dir != "" {
		ownerProcess(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

// ownerProcess is the child of TestServerDiesWithOwner: it starts a cluster,
// prints the postmaster's PID and waits to be killed.
func ownerProcess(dir string) {
	c, err := Start(context.Background(), Options{Dir: dir, Settings: TestSettings()})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("PID", c.proc.cmd.Process.Pid)
	select {}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// start starts a throwaway cluster in a fresh directory and stops it when
// the test ends. t.TempDir is root-owned 0700 when tests run as root, so
// this also exercises makeTraversable.
func start(t *testing.T, dir string, settings map[string]string) *Cluster {
	t.Helper()
	if settings == nil {
		settings = TestSettings()
	}
	c, err := Start(t.Context(), Options{Dir: dir, Settings: settings, Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop()) })
	return c
}

func query(t *testing.T, url, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&n))
	return n
}

func execSQL(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	settings := TestSettings()
	settings["wal_compression"] = "no-such-method" // must fall back to off, not fail
	c := start(t, dir, settings)
	require.True(t, c.Created())
	require.NotZero(t, c.Port())
	require.Equal(t, dir, c.Dir())

	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	url := c.URL()
	require.Equal(t, "comb", queryString(t, url, "SELECT current_database()"))
	require.Equal(t, "off", queryString(t, url, "SHOW fsync"))
	require.Equal(t, "off", queryString(t, url, "SHOW wal_compression"))
	// The server runs with synchronous_commit off; like the store, this
	// session turns it on, so an immediate shutdown cannot lose the commit.
	execSQL(t, url, "SET synchronous_commit = on; CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")

	// A crash-like restart keeps committed data and the port.
	port := c.Port()
	require.NoError(t, c.Restart(t.Context(), true))
	require.Equal(t, port, c.Port())
	require.Equal(t, 7, query(t, url, "SELECT v FROM kept"))

	require.NoError(t, c.Restart(t.Context(), false))
	require.Equal(t, 7, query(t, url, "SELECT v FROM kept"))

	require.NoError(t, c.Stop())
	require.NoError(t, c.Stop(), "stop twice")
	_, err = os.Stat(filepath.Join(dir, "postmaster.pid"))
	require.ErrorIs(t, err, os.ErrNotExist, "fast shutdown removes the lock file")

	// A fixed port that another process holds is a clear error.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, err = Start(t.Context(), Options{Dir: dir, Port: l.Addr().(*net.TCPAddr).Port,
		Settings: TestSettings(), Logger: testLogger(t)})
	require.NoError(t, l.Close())
	require.ErrorIs(t, err, ErrPortInUse)
	require.Contains(t, err.Error(), "could not bind")

	// A second Start reuses the directory and its data.
	c2 := start(t, dir, nil)
	require.False(t, c2.Created())
	require.Equal(t, 7, query(t, c2.URL(), "SELECT v FROM kept"))
}

func queryString(t *testing.T, url, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var s string
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&s))
	return s
}

// TestStaleServer plays a crashed earlier run: a server still serves the
// directory (its owner forgot it), then only its lock file remains.
func TestStaleServer(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	old := start(t, dir, nil)
	oldPid := old.proc.cmd.Process.Pid

	c := start(t, dir, nil)
	require.False(t, c.Created())
	require.NotEqual(t, oldPid, c.proc.cmd.Process.Pid)
	select {
	case <-old.proc.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stale server was not stopped")
	}
	require.NoError(t, old.Stop(), "stopping an already dead server is fine")
	require.Equal(t, 1, query(t, c.URL(), "SELECT 1"))

	// A lock file naming a live process that is not PostgreSQL (PID 1
	// here) must not block a start.
	require.NoError(t, c.Kill())
	pidFile := filepath.Join(dir, "postmaster.pid")
	require.NoError(t, os.WriteFile(pidFile, []byte("1\n"+dir+"\n"), 0o600))
	require.NoError(t, c.Start(t.Context()))
	require.Equal(t, 1, query(t, c.URL(), "SELECT 1"))
}

// TestServerDiesWithOwner checks that a SIGKILLed owner (a crashed test
// binary, a killed broker) leaves no PostgreSQL server behind.
func TestServerDiesWithOwner(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	cmd := osexec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGCLUSTER_TEST_OWNER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscanf(line, "PID %d", &pid)
	require.NoError(t, err, line)
	require.True(t, alive(pid))

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !alive(pid) && len(serverProcesses(dir)) == 0 },
		15*time.Second, 20*time.Millisecond, "postgres outlived its owner")
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	dir, err := FindBinDir()
	require.NoError(t, err)
	require.True(t, hasInitdb(dir), dir)
	major, err := serverMajor(dir)
	require.NoError(t, err)
	require.NotEmpty(t, major)
}

func TestParseMajor(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n": "15",
		"postgres (PostgreSQL) 9.6.24":                           "9.6",
		"postgres (PostgreSQL) 17devel":                          "17",
		"postgres (PostgreSQL) 16beta1":                          "16",
	} {
		got, ok := parseMajor(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	_, ok := parseMajor("bash: postgres: not found")
	require.False(t, ok)
}

// connectErr returns the error of connecting to url, nil if it connects.
func connectErr(t *testing.T, url string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		_ = conn.Close(context.Background())
	}
	return err
}

// TestPasswordRequired: a new cluster has a random password in a 0600
// file, no trust line, and refuses a connection without the password or
// with a wrong one; the URLs it hands out connect.
func TestPasswordRequired(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	c := start(t, dir, nil)

	st, err := os.Stat(c.PasswordFile())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.Equal(t, filepath.Join(dir, PasswordFileName), c.PasswordFile())
	pw, err := ReadPassword(dir)
	require.NoError(t, err)
	require.Len(t, pw, 48)
	hba, err := os.ReadFile(filepath.Join(dir, "pg_hba.conf"))
	require.NoError(t, err)
	require.False(t, hbaTrusts(hba), string(hba))
	require.Equal(t, hbaConf, string(hba))

	require.Contains(t, c.URL(), ":"+pw+"@", "Comb connects with no setup by hand")
	require.Equal(t, 1, query(t, c.URL(), "SELECT 1"))
	require.NotContains(t, c.PassfileURL(), pw, "the URL to log holds no password")
	require.Equal(t, 1, query(t, c.PassfileURL(), "SELECT 1"), "the passfile URL connects")
	fromDir, err := URLFromDir(dir, "")
	require.NoError(t, err)
	require.Equal(t, c.URL(), fromDir)

	noPW := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/comb?sslmode=disable", c.Port())
	require.Error(t, connectErr(t, noPW), "no password")
	err = connectErr(t, fmt.Sprintf("postgres://postgres:wrong@127.0.0.1:%d/comb?sslmode=disable", c.Port()))
	require.Error(t, err)
	require.Contains(t, err.Error(), "28P01", "invalid_password: %v", err)
	if s := c.socketDir(); s != "" {
		err = connectErr(t, fmt.Sprintf("host=%s port=%d user=postgres password=wrong dbname=comb", s, c.Port()))
		require.Error(t, err, "the socket asks for the password too")
		require.Equal(t, 1, query(t, fmt.Sprintf("host=%s port=%d user=postgres password=%s dbname=comb", s, c.Port(), pw),
			"SELECT 1"), "the socket takes the password")
	}

	// Restarts and reuse keep the password.
	require.NoError(t, c.Restart(t.Context(), true))
	require.Equal(t, 1, query(t, c.URL(), "SELECT 1"))
	require.NoError(t, c.Stop())
	c2 := start(t, dir, nil)
	require.Equal(t, c.password, c2.password)
	require.Equal(t, 1, query(t, c2.URL(), "SELECT 1"))
}

// TestUpgradeTrustDirectory: a data directory made by an earlier Comb,
// with initdb --auth=trust and no password file, gets a password and a
// pg_hba.conf without trust on its next start, and keeps its data.
func TestUpgradeTrustDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	old, err := newCluster(Options{Dir: dir, Settings: TestSettings(), Logger: testLogger(t)})
	require.NoError(t, err)
	require.NoError(t, old.prepareDirs())
	out, err := old.tool(t.Context(), "initdb", "-D", dir, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput()
	require.NoError(t, err, string(out))
	hba, err := os.ReadFile(filepath.Join(dir, "pg_hba.conf"))
	require.NoError(t, err)
	require.True(t, hbaTrusts(hba), "the old way trusted local connections")
	// A table written in the trust era, in single-user mode (no socket).
	cmd := old.tool(t.Context(), "postgres", "--single", "-D", dir, "-c", "listen_addresses=",
		"-c", "unix_socket_directories=", "postgres")
	cmd.Stdin = strings.NewReader("CREATE TABLE kept (v int);\nINSERT INTO kept VALUES (7);\n")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	_, err = os.Stat(filepath.Join(dir, PasswordFileName))
	require.ErrorIs(t, err, os.ErrNotExist)

	c := start(t, dir, nil)
	require.False(t, c.Created())
	hba, err = os.ReadFile(filepath.Join(dir, "pg_hba.conf"))
	require.NoError(t, err)
	require.Equal(t, hbaConf, string(hba))
	st, err := os.Stat(c.PasswordFile())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.Equal(t, 7, query(t, c.urlFor("postgres"), "SELECT v FROM kept"))
	require.Error(t, connectErr(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port())),
		"trust is gone")
}

// TestOtherOSUserRefused plays the attacker of the issue: another OS user
// on the machine (nobody) runs psql against the cluster, over TCP on
// 127.0.0.1 and over the Unix socket, and is refused both ways, while
// Comb's URL connects. It needs root, to be someone else.
func TestOtherOSUserRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run psql as another OS user")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no `nobody` OS user")
	}
	runuser, err := osexec.LookPath("runuser")
	if err != nil {
		t.Skip("no runuser")
	}
	dir := filepath.Join(t.TempDir(), "data")
	c := start(t, dir, nil)
	psql := filepath.Join(c.bin, "psql")
	as := func(who string, env []string, args ...string) (string, error) {
		cmd := osexec.CommandContext(t.Context(), runuser, append([]string{"-u", who, "--", psql, "-w", "-X", "-At"}, args...)...)
		cmd.Dir = "/"
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/"}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	port := strconv.Itoa(c.Port())

	out, err := as("nobody", nil, "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "comb", "-c", "SELECT 1")
	require.Error(t, err, out)
	require.Contains(t, out, "password", "TCP asks for the password")
	out, err = as("nobody", []string{"PGPASSWORD=guess"}, "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "comb", "-c", "SELECT 1")
	require.Error(t, err, out)
	require.Contains(t, out, "password authentication failed")
	out, err = as("nobody", []string{"PGPASSFILE=" + c.PasswordFile()}, "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "comb", "-c", "SELECT 1")
	require.Error(t, err, "nobody cannot read the password file: %s", out)
	require.NotEmpty(t, c.socketDir(), "the test directory is short enough for a socket")
	out, err = as("nobody", nil, "-h", c.socketDir(), "-p", port, "-U", "postgres", "-d", "comb", "-c", "SELECT 1")
	require.Error(t, err, out)
	require.Contains(t, out, "Permission denied", "the socket is inside the 0700 data directory")
	_, err = osexec.Command(runuser, "-u", "nobody", "--", "cat", c.PasswordFile()).CombinedOutput()
	require.Error(t, err, "nobody cannot read the password")

	// The same psql, as the server's own OS user with the password file,
	// connects: the refusals above are the cluster's, not a broken psql.
	out, err = as("postgres", nil, c.PassfileURL(), "-c", "SELECT 1")
	require.NoError(t, err, out)
	require.Equal(t, "1\n", out)
	require.Equal(t, 1, query(t, c.URL(), "SELECT 1"), "Comb connects")
}
