//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cli

import "os"

// isTerminal is false where the terminal ioctl is not known: delete then
// wants --force.
func isTerminal(*os.File) bool { return false }
