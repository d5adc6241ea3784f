package bridge_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/protocol"
)

// TestGroupsVerb lists and deletes groups over a running broker, and shows
// a deleted abandoned group letting completed retention sweep the queue.
func TestGroupsVerb(t *testing.T) {
	t.Parallel()
	env := combtest.StartWith(t, combtest.Options{SweepInterval: 100 * time.Millisecond})
	nc := env.NC

	requireError(t, request(t, nc, "comb.groups.nope", ``), 404, `queue "nope"`)
	call(t, nc, "comb.configure.g", `{"completed_retention_s":1,"max_attempts":1}`, nil)
	var rep protocol.GroupsReply
	call(t, nc, "comb.groups.g", ``, &rep)
	require.NotNil(t, rep.Groups)
	require.Empty(t, rep.Groups)

	push(t, nc, "g", `{"messages":[{"data":1},{"data":2},{"data":3}]}`)
	// "abandoned" takes one message, fails it to the dead letters and
	// never comes back; "live" completes everything.
	ms := pop(t, nc, "g", `{"group":"abandoned","max":1}`)
	require.True(t, ack(t, nc, "g", ackBody("abandoned", ms[0], "failed"))[0].OK)
	pop(t, nc, "g", `{"group":"abandoned","max":1}`) // leased, never acked
	ms = pop(t, nc, "g", `{"group":"live","max":10}`)
	require.True(t, ack(t, nc, "g", ackBody("live", ms[2], "completed"))[0].OK)

	call(t, nc, "comb.groups.g", `{}`, &rep)
	require.Len(t, rep.Groups, 2)
	ab := rep.Groups[0]
	require.Equal(t, "abandoned", ab.Name)
	require.Equal(t, int64(2), ab.Pending)
	require.Equal(t, int64(1), ab.Leased)
	require.Equal(t, int64(1), ab.Dead)
	require.Positive(t, ab.OldestPendingAgeS)
	require.Equal(t, protocol.GroupState{Name: "live"}, rep.Groups[1])

	// Bad input: a 400 naming the field, and nothing deleted.
	requireError(t, request(t, nc, "comb.groups.g", `{"delete":""}`), 400, "delete")
	requireError(t, request(t, nc, "comb.groups.g", `{"delete":7}`), 400, "delete")
	requireError(t, request(t, nc, "comb.groups.g", "{\"delete\":\"a\\u0000\"}"), 400, "delete")
	requireError(t, request(t, nc, "comb.groups.g", `{"group":"abandoned"}`), 400, "group")
	requireError(t, request(t, nc, "comb.groups.g", `[]`), 400, "")
	requireError(t, request(t, nc, "comb.groups.g", `{"delete":"nope"}`), 404, `group "nope"`)
	requireError(t, request(t, nc, "comb.groups.nope", `{"delete":"abandoned"}`), 404, `queue "nope"`)
	call(t, nc, "comb.groups.g", ``, &rep)
	require.Len(t, rep.Groups, 2)

	// Deleting the abandoned group lets retention sweep what live completed.
	var ok protocol.OKReply
	call(t, nc, "comb.groups.g", `{"delete":"abandoned"}`, &ok)
	require.True(t, ok.OK)
	call(t, nc, "comb.groups.g", ``, &rep)
	require.Equal(t, []protocol.GroupState{{Name: "live"}}, rep.Groups)
	require.Zero(t, info(t, nc, "g").DeadLetters, "its dead letters went with it")
	require.Eventually(t, func() bool { return info(t, nc, "g").Messages == 0 }, 15*time.Second, 100*time.Millisecond,
		"completed retention proceeds past the deleted group")
}

// TestGroupsPerTenant: a tenant lists and deletes only its own groups.
func TestGroupsPerTenant(t *testing.T) {
	t.Parallel()
	env := startTenants(t)
	a, b := connectAs(t, env, "alice", "pa"), connectAs(t, env, "bob", "pb")
	for _, nc := range []*nats.Conn{a, b} {
		push(t, nc, "t", `{"messages":[{"data":1}]}`)
		pop(t, nc, "t", `{"group":"g"}`)
	}
	var ok protocol.OKReply
	call(t, a, "comb.groups.t", `{"delete":"g"}`, &ok)
	var rep protocol.GroupsReply
	call(t, a, "comb.groups.t", ``, &rep)
	require.Empty(t, rep.Groups)
	call(t, b, "comb.groups.t", ``, &rep)
	require.Len(t, rep.Groups, 1, "B's group of the same name stays")
	require.Equal(t, int64(1), rep.Groups[0].Leased)
}
