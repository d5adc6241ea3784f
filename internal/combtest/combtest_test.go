package combtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/combmq/comb/bridge"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func TestConfig(t *testing.T) {
	t.Parallel()
	cfg := Options{Bridge: bridge.Config{PushWorkers: 1}}.Config("postgres://x@127.0.0.1/db")
	require.Equal(t, -1, cfg.NATS.Port, "a random port")
	require.Equal(t, embeddednats.NoMonitoring, cfg.NATS.HTTPPort)
	require.Empty(t, cfg.Pprof)
	require.Equal(t, time.Second, cfg.SweepInterval, "the sweeper runs as under comb serve")
	require.Equal(t, 1, cfg.Bridge.PushWorkers)
	require.NoError(t, cfg.Validate())
}

// TestSweeperRuns: tests run the retention sweeper that `comb serve`
// runs, so retention settings take effect in them.
func TestSweeperRuns(t *testing.T) {
	t.Parallel()
	env := StartWith(t, Options{SweepInterval: 50 * time.Millisecond})
	_, err := env.NC.Request("comb.configure.old", []byte(`{"max_age_s":1}`), 10*time.Second)
	require.NoError(t, err)
	_, err = env.NC.Request("comb.put.old", []byte("x"), 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		m, err := env.NC.Request("comb.info.old", nil, 10*time.Second)
		require.NoError(t, err)
		var rep struct {
			Messages int `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &rep))
		return rep.Messages == 0
	}, 20*time.Second, 100*time.Millisecond, "max_age_s removed the message")

	second := AddBridge(t, env, bridge.Config{})
	require.NotNil(t, second)
}
