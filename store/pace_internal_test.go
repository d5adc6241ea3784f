package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The sweeper reads the ready set every sweep while its windows find work,
// and after windows that find none skips 1, 3, 7, then 15 sweeps between
// reads; a window with work puts it back to every sweep.
func TestReadyPace(t *testing.T) {
	var p readyPace
	var skipped []int
	run := func(idle bool) {
		n := 0
		for !p.due() {
			n++
		}
		skipped = append(skipped, n)
		p.read(idle)
	}
	for range 6 {
		run(true)
	}
	run(false)
	run(false)
	run(true)
	run(true)
	require.Equal(t, []int{0, 1, 3, 7, 15, 15, 15, 0, 0, 1}, skipped)
}
