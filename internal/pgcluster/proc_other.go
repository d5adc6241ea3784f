//go:build !linux

package pgcluster

import "syscall"

// serverProcAttr keeps Ctrl-C on the terminal away from PostgreSQL; other
// systems have no parent-death signal, so a crashed Comb may leave the
// server running until the next Start stops it.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}

func toolProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}

// serverProcesses cannot see other processes' working directories here;
// PostgreSQL's own postmaster.pid check is the only guard.
func serverProcesses(string) []int { return nil }

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}
