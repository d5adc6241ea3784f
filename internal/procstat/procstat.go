// Package procstat reads processes' CPU time and resident memory from
// Linux's /proc, for the loader's resource figures and the benchmark
// programs under docs/benchmarks.
package procstat

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClockTicks is USER_HZ, the unit of /proc CPU times: 100 on every Linux
// architecture Go supports.
const ClockTicks = 100

// PostgresPIDs returns the postmaster and its children, or, with no
// postmaster known, every process named postgres.
func PostgresPIDs(postmaster int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		comm, fields, ok := splitStat(stat)
		if !ok {
			continue
		}
		if postmaster > 0 {
			ppid, _ := strconv.Atoi(fields[1])
			if pid == postmaster || ppid == postmaster {
				out = append(out, pid)
			}
			continue
		}
		if comm == "postgres" {
			out = append(out, pid)
		}
	}
	return out
}

// splitStat splits /proc/<pid>/stat into the command name and the fields
// after it (fields[0] is the state, field 3 of proc(5)).
func splitStat(b []byte) (string, []string, bool) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return "", nil, false
	}
	return string(b[open+1 : closing]), strings.Fields(string(b[closing+1:])), true
}

// CPUTicks returns a process's user plus system CPU time in ticks.
func CPUTicks(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	_, f, ok := splitStat(b)
	// utime and stime are fields 14 and 15 of proc(5): f[11] and f[12].
	if !ok || len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return u + st, true
}

// SelfCPU returns this process's user plus system CPU time so far, from
// getrusage: to the microsecond, where CPUTicks counts 10 ms ticks. 0 if
// unreadable.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RSS returns a process's resident memory in MB, NaN if unreadable.
func RSS(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return math.NaN()
	}
	pages, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return math.NaN()
	}
	return pages * float64(os.Getpagesize()) / 1e6
}
