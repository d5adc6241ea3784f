package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// StartStandby makes a streaming standby of primary in opts.Dir, which
// must not hold a cluster yet: pg_basebackup -R copies the primary (its
// password file and pg_hba.conf come along, so the standby takes the same
// password) and writes standby.signal and a primary_conninfo, and the
// standby then starts as a server of its own, read-only and replaying
// what the primary streams. The primary needs no setting beyond
// PostgreSQL's defaults (wal_level replica, max_wal_senders 10), and
// pg_hba.conf already lets the superuser replicate over loopback with
// its password. Fault tests use it to fail over with Promote.
func StartStandby(ctx context.Context, primary *Cluster, opts Options) (*Cluster, error) {
	if opts.BinDir == "" {
		opts.BinDir = primary.bin
	}
	if opts.Database == "" {
		opts.Database = primary.db
	}
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.dir, "PG_VERSION")); err == nil {
		return nil, fmt.Errorf("pgcluster: %s already holds a cluster: a standby needs an empty directory", c.dir)
	}
	if err := c.prepareDirs(); err != nil {
		return nil, err
	}
	args := []string{"-D", c.dir, "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", superuser,
		"-R", "-X", "stream", "-c", "fast", "-w"}
	if c.settings["fsync"] == "off" {
		args = append(args, "--no-sync")
	}
	cmd := c.tool(ctx, "pg_basebackup", args...)
	// The password goes into the standby's postgresql.auto.conf, which
	// is as private as its copy of the password file.
	cmd.Env = append(cmd.Env, "PGPASSWORD="+primary.password)
	start := time.Now()
	if out, err := combinedOutput(cmd); err != nil {
		return nil, fmt.Errorf("pgcluster: pg_basebackup from port %d: %w\n%s", primary.port, err, lastLines(out, 20))
	}
	// The primary's server log came along with the copy; the standby
	// writes its own.
	if err := os.Remove(c.logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pgcluster: standby log: %w", err)
	}
	c.log.Info("made a standby", "dir", c.dir, "primary_port", primary.port,
		"took", time.Since(start).Round(time.Millisecond))
	if err := c.prepare(ctx); err != nil {
		return nil, err
	}
	if err := c.launchPicking(ctx, opts.Port == 0); err != nil {
		return nil, err
	}
	return c, nil
}

// Promote ends recovery on a standby (pg_ctl promote) and waits until it
// accepts writes as a primary of its own.
func (c *Cluster) Promote(ctx context.Context) error {
	out, err := combinedOutput(c.tool(ctx, "pg_ctl", "promote", "-D", c.dir, "-w", "-t", "60"))
	if err != nil {
		return fmt.Errorf("pgcluster: pg_ctl promote %s: %w\n%s", c.dir, err, lastLines(out, 20))
	}
	c.log.Info("promoted", "dir", c.dir, "port", c.port)
	return nil
}
