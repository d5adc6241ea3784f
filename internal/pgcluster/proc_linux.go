//go:build linux

package pgcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// serverProcAttr runs postgres in its own process group, so a Ctrl-C on the
// terminal reaches Comb (which drains first) and not PostgreSQL, and asks the
// kernel to send SIGQUIT (immediate shutdown) to the postmaster if Comb dies
// without stopping it, so a crashed test binary or a SIGKILLed broker leaves
// no server behind.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
}

func toolProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// serverProcesses lists the PostgreSQL processes whose working directory is
// dataDir: the postmaster and every backend chdir into the data directory,
// so this finds a server left by a crashed run even when its postmaster.pid
// is gone or its postmaster was killed and only backends remain.
func serverProcesses(dataDir string) []int {
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || cwd != want {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil {
			continue
		}
		if b := filepath.Base(strings.TrimSuffix(exe, " (deleted)")); b != "postgres" && b != "postmaster" {
			continue
		}
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid exists and is not a zombie waiting for a parent
// (often a container's PID 1) to reap it.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}
