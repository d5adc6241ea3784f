//go:build unix

package freeport

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// reserved holds the lock files of the ports this process picked, open
// for its whole life: the kernel drops the locks when it exits, however
// it exits.
var reserved []*os.File

// lockDir is the directory of the lock files, made once per process and
// shared by every user's tests (sticky, like /tmp); "" when it cannot be
// used.
var lockDir = sync.OnceValue(func() string {
	dir := filepath.Join(os.TempDir(), "comb-freeport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return ""
	}
	_ = os.Chmod(dir, 0o777|os.ModeSticky) // fails, harmlessly, unless we made it
	return dir
})

// reserve takes the machine-wide lock on port p, or reports that another
// live process holds it. When the lock directory cannot be used (another
// user made it, a read-only /tmp) it reserves nothing and says yes: the
// picker is then as good as it was without locks, no worse.
func reserve(p int) bool {
	dir := lockDir()
	if dir == "" {
		return true
	}
	// Never written, and never a link followed.
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return !errors.Is(err, syscall.EWOULDBLOCK)
	}
	reserved = append(reserved, f)
	return true
}
