package bridge_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/broker"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/protocol"
)

func startSpooled(t *testing.T, maintenance bool) *combtest.Env {
	t.Helper()
	dir := t.TempDir()
	return combtest.StartWith(t, combtest.Options{Tune: func(c *broker.Config) {
		c.SpoolDir, c.SpoolMaxBytes = dir, 1<<20
		c.Bridge.Maintenance = maintenance
		c.Bridge.DrainBatchMessages = 3 // several drain transactions
	}})
}

func maintenance(t *testing.T, env *combtest.Env, body string) protocol.MaintenanceReply {
	t.Helper()
	var rep protocol.MaintenanceReply
	call(t, env.NC, "comb.maintenance", body, &rep)
	return rep
}

func pushBody(from, n int) string {
	return messagesBody(n, func(i int) (string, int) { return "p", from + i })
}

// messagesBody is a push body of n messages, message i in the partition
// and with the JSON number data that of returns.
func messagesBody(n int, of func(i int) (partition string, data int)) string {
	msgs := make([]string, n)
	for i := range msgs {
		p, d := of(i)
		msgs[i] = fmt.Sprintf(`{"partition":%q,"data":%d}`, p, d)
	}
	return `{"messages":[` + strings.Join(msgs, ",") + `]}`
}

// TestMaintenanceSpoolsAndDrainsInOrder: in maintenance every push is
// answered "spooled" without an offset and every other verb 503; leaving
// it drains the spool, and the partition's offsets follow push order:
// stored before, spooled, then stored after.
func TestMaintenanceSpoolsAndDrainsInOrder(t *testing.T) {
	t.Parallel()
	env := startSpooled(t, false)
	nc := env.NC
	for _, r := range push(t, nc, "mq", pushBody(0, 3)) {
		require.Equal(t, "stored", r.Status)
	}
	rep := maintenance(t, env, `{"on":true}`)
	require.True(t, rep.Maintenance)
	require.NotNil(t, rep.Spool)
	require.Zero(t, rep.Spool.Records)

	for i := 3; i < 12; i += 3 {
		for _, r := range push(t, nc, "mq", pushBody(i, 3)) {
			require.Equal(t, "spooled", r.Status)
			require.Nil(t, r.Offset, "a spooled message has no offset")
			require.Equal(t, "p", r.Partition)
		}
	}
	requireError(t, request(t, nc, "comb.pop.mq", `{"group":"g"}`), 503, "maintenance")
	requireError(t, request(t, nc, "comb.info.mq", ``), 503, "maintenance")
	requireError(t, request(t, nc, "comb.list", ``), 503, "maintenance")
	// A transaction is never spooled: its acks need PostgreSQL now.
	requireError(t, request(t, nc, "comb.txn", `{"push":[{"queue":"mq","messages":[{"data":1}]}]}`), 503, "maintenance")
	rep = maintenance(t, env, ``)
	require.True(t, rep.Maintenance)
	require.EqualValues(t, 3, rep.Spool.Records)
	require.EqualValues(t, 9, rep.Spool.Messages)
	require.Positive(t, rep.Spool.OldestAgeS)

	require.False(t, maintenance(t, env, `{"on":false}`).Maintenance)
	// Pushed while the drain may still run: spooled behind the rest, or
	// stored once it is done; in order either way.
	push(t, nc, "mq", pushBody(12, 3))
	waitFor(t, func() bool {
		s := maintenance(t, env, ``).Spool
		return s.Records == 0 && s.Drained >= 9
	})
	got := pop(t, nc, "mq", `{"group":"g","max":100}`)
	require.Len(t, got, 15)
	for i, m := range got {
		require.EqualValues(t, i, m.Offset)
		require.Equal(t, strconv.Itoa(i), string(m.Data), "offset %d", i)
	}
	requireError(t, request(t, nc, "comb.maintenance", `{"on":"yes"}`), 400, "maintenance")
}

// TestMaintenanceAtStartAndSpoolFull: a broker started in maintenance
// spools from its first push; a full spool refuses the rest with 503 and
// accepts nothing of them.
func TestMaintenanceAtStartAndSpoolFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := combtest.StartWith(t, combtest.Options{Tune: func(c *broker.Config) {
		c.SpoolDir, c.SpoolMaxBytes = dir, 2000
		c.Bridge.Maintenance = true
	}})
	nc := env.NC
	spooled, full := 0, 0
	for i := 0; i < 100 && full == 0; i++ {
		m := request(t, nc, "comb.push.full", pushBody(i, 1))
		if m.Header.Get("Nats-Service-Error-Code") == "503" {
			requireError(t, m, 503, "spool is full")
			full++
			continue
		}
		var rep protocol.PushReply
		require.NoError(t, json.Unmarshal(m.Data, &rep))
		require.Equal(t, protocol.StatusSpooled, rep.Results[0].Status)
		spooled++
	}
	require.Equal(t, 1, full)
	require.Greater(t, spooled, 5)
	rep := maintenance(t, env, `{"on":false}`)
	require.False(t, rep.Maintenance)
	waitFor(t, func() bool { return maintenance(t, env, ``).Spool.Records == 0 })
	got := pop(t, nc, "full", `{"group":"g","max":1000}`)
	require.Len(t, got, spooled, "every spooled message, none of the refused")
	for i, m := range got {
		require.Equal(t, strconv.Itoa(i), string(m.Data))
	}
}
