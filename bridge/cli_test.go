package bridge_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/testenv"
	"github.com/combmq/comb/protocol"
)

// TestMicroCLI checks that `nats micro ls/info/stats` find the service: the
// CLI validates each response against the micro JSON schemas and drops the
// ones that fail, so finding it means it passed.
func TestMicroCLI(t *testing.T) {
	t.Parallel()
	cli := testenv.NATSCLI(t)
	env := combtest.Start(t)
	// Some traffic, so stats carry figures and errors.
	push(t, env.NC, "cli", `{"messages":[{"data":1}]}`)
	request(t, env.NC, "comb.pop.cli", `{"max":0}`)
	request(t, env.NC, "comb.pop.nope", ``)

	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, append([]string{"--server", env.URL, "--timeout", "5s"}, args...)...)
		// A private home: no user contexts or settings leak in.
		home := t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "nats %v: %s", args, out)
		return out
	}

	var ls []struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		ID      string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(run("micro", "ls", "--json"), &ls))
	require.Len(t, ls, 1)
	require.Equal(t, "comb", ls[0].Name)
	require.Equal(t, "0.1.0", ls[0].Version)

	var info struct {
		Info struct {
			Name      string `json:"name"`
			Endpoints []struct {
				Name       string `json:"name"`
				Subject    string `json:"subject"`
				QueueGroup string `json:"queue_group"`
			} `json:"endpoints"`
		} `json:"info"`
	}
	out := run("micro", "info", "comb", ls[0].ID, "--json")
	require.NoError(t, json.Unmarshal(out, &info), "%s", out)
	require.Equal(t, "comb", info.Info.Name, "%s", out)
	subjects := map[string]string{}
	for _, e := range info.Info.Endpoints {
		subjects[e.Name] = e.Subject
		require.Equal(t, "comb", e.QueueGroup)
	}
	require.Equal(t, map[string]string{
		"push": "comb.push.>", "put": "comb.put.>", "pop": "comb.pop.>", "ack": "comb.ack.>",
		"renew": "comb.renew.>", "seek": "comb.seek.>", "configure": "comb.configure.>", "info": "comb.info.>", "list": "comb.list",
		"delete": "comb.delete.>", "dlq": "comb.dlq.>", "groups": "comb.groups.>", "peek": "comb.peek.>", "maintenance": "comb.maintenance",
		"txn":  "comb.txn",
		"npop": "comb.npop.>",
	}, subjects)

	var stats []struct {
		Name      string `json:"name"`
		Endpoints []struct {
			Name        string          `json:"name"`
			NumRequests int             `json:"num_requests"`
			NumErrors   int             `json:"num_errors"`
			Data        json.RawMessage `json:"data"`
		} `json:"endpoints"`
	}
	out = run("micro", "stats", "comb", "--json")
	require.NoError(t, json.Unmarshal(out, &stats), "%s", out)
	require.Len(t, stats, 1)
	require.Len(t, stats[0].Endpoints, len(protocol.Verbs)+len(protocol.OperatorVerbs))
	found := false
	for _, e := range stats[0].Endpoints {
		if e.Name != "pop" {
			continue
		}
		found = true
		require.Equal(t, 2, e.NumRequests)
		var d struct {
			InFlight    int64 `json:"in_flight"`
			AsyncErrors int64 `json:"async_errors"`
			Waiting     *int  `json:"waiting"`
		}
		require.NoError(t, json.Unmarshal(e.Data, &d))
		require.Equal(t, 1, e.NumErrors, "the 400 answered by the handler")
		require.EqualValues(t, 1, d.AsyncErrors, "the 404 answered by a worker")
		require.NotNil(t, d.Waiting)
	}
	require.True(t, found, "pop endpoint in stats")
	// The plain text forms run too.
	run("micro", "info", "comb")
	run("micro", "stats", "comb")
}
