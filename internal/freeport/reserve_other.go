//go:build !unix

package freeport

// reserve reserves nothing where there are no flock locks: ports are then
// only kept apart within one process.
func reserve(int) bool { return true }
