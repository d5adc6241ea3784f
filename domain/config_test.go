package domain_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

func i64(v int64) *int64 { return &v }

func TestDefaultQueueConfigIsValid(t *testing.T) {
	t.Parallel()
	c := domain.DefaultQueueConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, int64(protocol.DefaultLeaseMS), c.LeaseMS)
	require.True(t, c.DeadLetter)
}

func TestValidateNamesEveryFieldOutOfRange(t *testing.T) {
	t.Parallel()
	c := domain.DefaultQueueConfig()
	c.LeaseMS, c.MaxAttempts, c.MaxMessageBytes = 99, 0, protocol.MaxMessageBytes+1
	err := c.Validate()
	require.ErrorIs(t, err, domain.ErrInvalid)
	require.Contains(t, err.Error(), "lease_ms: 99 is out of range 100..86400000")
	require.Contains(t, err.Error(), "max_attempts: 0 is out of range 1..1000")
	require.Contains(t, err.Error(), "max_message_bytes: 8388609 is out of range 1..8388608")
	require.NotContains(t, err.Error(), "invalid request", "the message is the client's to read as it is")
}

func TestPatchMergesAndValidates(t *testing.T) {
	t.Parallel()
	c, err := domain.ConfigPatch{MaxAttempts: i64(5)}.Apply(domain.DefaultQueueConfig())
	require.NoError(t, err)
	require.Equal(t, int64(5), c.MaxAttempts)
	require.Equal(t, int64(protocol.DefaultLeaseMS), c.LeaseMS, "fields left out keep their value")

	require.NoError(t, domain.ConfigPatch{}.Validate())
	require.NoError(t, domain.ConfigPatch{CompletedRetentionS: i64(protocol.MaxRetentionS)}.Validate())
	err = domain.ConfigPatch{CompletedRetentionS: i64(protocol.MaxRetentionS + 1)}.Validate()
	require.ErrorIs(t, err, domain.ErrInvalid)
	require.Contains(t, err.Error(), "completed_retention_s")
	require.ErrorIs(t, domain.ConfigPatch{MaxBytes: i64(-1)}.Validate(), domain.ErrInvalid)
}

// TestProtocolDocMatchesSettings holds the queue settings table of
// docs/protocol.md to the code: every setting with its default and range.
func TestProtocolDocMatchesSettings(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/protocol.md")
	require.NoError(t, err)
	rows := map[string][]string{}
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| [^|]+ \\|([^|]*)\\|([^|]*)\\|$")
	for _, line := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			rows[m[1]] = []string{strings.TrimSpace(m[2]), strings.TrimSpace(m[3])}
		}
	}
	def := domain.DefaultQueueConfig()
	num := func(s string) int64 {
		if s == "2^53-1" {
			return protocol.MaxCount
		}
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, s)
		return v
	}
	for field, v := range map[string]int64{
		"lease_ms": def.LeaseMS, "max_attempts": def.MaxAttempts, "dedup_window_s": def.DedupWindowS,
		"completed_retention_s": def.CompletedRetentionS, "max_age_s": def.MaxAgeS, "delay_ms": def.DelayMS,
		"max_messages": def.MaxMessages, "max_bytes": def.MaxBytes, "max_message_bytes": def.MaxMessageBytes,
		"retry_delay_ms": def.RetryDelayMS, "retry_backoff_pct": def.RetryBackoffPct, "retry_delay_max_ms": def.RetryDelayMaxMS,
	} {
		r, ok := rows[field]
		require.True(t, ok, "docs/protocol.md lists %s", field)
		require.Equal(t, strconv.FormatInt(v, 10), r[0], "default of %s", field)
		lo, hi, ok := strings.Cut(r[1], "–")
		require.True(t, ok, "range of %s", field)
		// The range's ends are valid and one past them is not.
		for _, probe := range []struct {
			v     int64
			valid bool
		}{{num(lo), true}, {num(hi), true}, {num(lo) - 1, false}, {num(hi) + 1, false}} {
			c := def
			*fieldOf(&c, field) = probe.v
			require.Equal(t, probe.valid, c.Validate() == nil, "%s = %d", field, probe.v)
		}
	}
	require.Equal(t, "true", rows["dead_letter"][0])
}

func fieldOf(c *domain.QueueConfig, field string) *int64 {
	return map[string]*int64{
		"lease_ms": &c.LeaseMS, "max_attempts": &c.MaxAttempts, "dedup_window_s": &c.DedupWindowS,
		"completed_retention_s": &c.CompletedRetentionS, "max_age_s": &c.MaxAgeS, "delay_ms": &c.DelayMS,
		"max_messages": &c.MaxMessages, "max_bytes": &c.MaxBytes, "max_message_bytes": &c.MaxMessageBytes,
		"retry_delay_ms": &c.RetryDelayMS, "retry_backoff_pct": &c.RetryBackoffPct, "retry_delay_max_ms": &c.RetryDelayMaxMS,
	}[field]
}

// TestRetryDelay: the delay of the n-th failed attempt grows by the
// backoff percent per attempt after the first, up to the cap, and is 0
// without a retry delay.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	c := domain.DefaultQueueConfig()
	for n := int64(0); n <= 5; n++ {
		require.Zero(t, c.RetryDelay(n), "no retry delay by default")
	}
	c.RetryDelayMS = 300
	for n := int64(1); n <= 5; n++ {
		require.Equal(t, int64(300), c.RetryDelay(n), "100%%: the same delay each attempt")
	}
	c.RetryBackoffPct, c.RetryDelayMaxMS = 200, 2000
	var got []int64
	for n := int64(1); n <= 6; n++ {
		got = append(got, c.RetryDelay(n))
	}
	require.Equal(t, []int64{300, 600, 1200, 2000, 2000, 2000}, got)

	c.RetryBackoffPct, c.RetryDelayMaxMS = 150, 0
	require.Equal(t, int64(450), c.RetryDelay(2))
	require.Equal(t, int64(675), c.RetryDelay(3))
	c.RetryBackoffPct = protocol.MaxRetryBackoffPct
	require.Equal(t, int64(protocol.MaxDelayMS), c.RetryDelay(protocol.MaxAttempts), "no cap: MaxDelayMS")

	c.RetryDelayMS, c.RetryDelayMaxMS = 5000, 1000
	require.Equal(t, int64(1000), c.RetryDelay(1), "the cap bounds the first delay too")
}
