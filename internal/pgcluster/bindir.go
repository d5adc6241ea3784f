package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNotInstalled means no PostgreSQL server binaries were found on this
// machine. Its text tells the user how to fix that.
var ErrNotInstalled = errors.New("no PostgreSQL server binaries found (looked at `pg_config --bindir`, " +
	"/usr/lib/postgresql/*/bin and PATH): install them with `apt-get install postgresql`, " +
	"or point Comb at a running server with --postgres-url / COMB_POSTGRES_URL")

// debianRoot is where Debian and Ubuntu install one directory per major
// version; a variable so tests could point it elsewhere.
var debianRoot = "/usr/lib/postgresql"

// FindBinDir returns the directory that holds initdb and postgres: the one
// `pg_config --bindir` names when it has initdb, else the newest
// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH. It
// returns ErrNotInstalled when there is none.
func FindBinDir() (string, error) {
	if dir := pgConfigBinDir(); dir != "" && hasInitdb(dir) {
		return dir, nil
	}
	if dirs := debianBinDirs(); len(dirs) > 0 {
		return dirs[0], nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNotInstalled
}

// binDirForMajor returns the binaries of one major version, for a data
// directory made by a version other than the default one.
func binDirForMajor(major string) string {
	dir := filepath.Join(debianRoot, major, "bin")
	if hasInitdb(dir) {
		return dir
	}
	return ""
}

func pgConfigBinDir() string {
	p, err := exec.LookPath("pg_config")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "--bindir").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// debianBinDirs lists /usr/lib/postgresql/*/bin that hold initdb, newest
// major version first.
func debianBinDirs() []string {
	entries, err := os.ReadDir(debianRoot)
	if err != nil {
		return nil
	}
	type cand struct {
		ver float64
		dir string
	}
	var cands []cand
	for _, e := range entries {
		v, err := strconv.ParseFloat(e.Name(), 64) // "15", or "9.6" for old ones
		if err != nil {
			continue
		}
		dir := filepath.Join(debianRoot, e.Name(), "bin")
		if hasInitdb(dir) {
			cands = append(cands, cand{v, dir})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].ver > cands[j].ver })
	out := make([]string, len(cands))
	for i, c := range cands {
		out[i] = c.dir
	}
	return out
}

func hasInitdb(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "initdb"))
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// serverMajor returns the major version of the postgres binary in binDir,
// as PG_VERSION spells it ("15", or "9.6" before version 10).
func serverMajor(binDir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	major, ok := parseMajor(string(out))
	if !ok {
		return "", fmt.Errorf("postgres --version: cannot parse %q", strings.TrimSpace(string(out)))
	}
	return major, nil
}

// parseMajor reads the major version out of `postgres --version`, e.g.
// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)" gives "15".
func parseMajor(out string) (string, bool) {
	s := strings.TrimSpace(out)
	_, s, ok := strings.Cut(s, "(PostgreSQL) ")
	if !ok {
		return "", false
	}
	ver, _, _ := strings.Cut(s, " ")
	parts := strings.Split(ver, ".")
	// "16beta1", "17devel": the major version is the leading digits.
	digits := parts[0]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i]
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return "", false
	}
	parts[0] = digits
	if n < 10 && len(parts) > 1 {
		return parts[0] + "." + parts[1], true
	}
	return parts[0], true
}
