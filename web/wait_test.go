package web

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A sample that is quick keeps the interval, counted from when it began;
// a slow one makes the sampler wait until sampling has taken a twentieth
// of the time; one under samplePaceFloor never does.
func TestSampleWait(t *testing.T) {
	for _, c := range []struct{ interval, took, want time.Duration }{
		{5 * time.Second, 10 * time.Millisecond, 4990 * time.Millisecond},
		{5 * time.Second, 250 * time.Millisecond, 4750 * time.Millisecond},
		{5 * time.Second, 400 * time.Millisecond, 7600 * time.Millisecond},
		{5 * time.Second, 2 * time.Second, 38 * time.Second},
		{100 * time.Millisecond, 0, 100 * time.Millisecond},
		{100 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond},
		{100 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond},
		{100 * time.Millisecond, 60 * time.Millisecond, 1140 * time.Millisecond},
	} {
		got := sampleWait(c.interval, c.took)
		require.Equal(t, c.want, got, "interval %s, took %s", c.interval, c.took)
		if c.took >= samplePaceFloor {
			require.LessOrEqual(t, float64(c.took)/float64(got+c.took), 1.0/sampleCostShare+1e-9, "sampling's share of the time")
		}
	}
}
