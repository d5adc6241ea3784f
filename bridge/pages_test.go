package bridge_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/protocol"
)

// Info and list replies are pages that fit under the connection's
// max_payload, whatever the queue holds: a queue whose partitions alone
// are ten times max_payload is read page by page, every partition and
// group exactly once, and so is a list of queues longer than one reply.
func TestInfoAndListPages(t *testing.T) {
	t.Parallel()
	const maxPayload = 32 << 10
	env := combtest.StartWith(t, combtest.Options{NATS: embeddednats.Config{MaxPayload: maxPayload}})
	c := comb.New(env.NC)
	ctx := t.Context()

	// 1,200 partitions with 200-byte names: about 290 KB of partitions.
	long := strings.Repeat("p", 200)
	var wantParts []string
	for batch := range 12 {
		var msgs []comb.Message
		for i := range 100 {
			name := fmt.Sprintf("%s-%04d", long, batch*100+i)
			wantParts = append(wantParts, name)
			msgs = append(msgs, comb.Message{Partition: name, Data: []byte(`1`)})
		}
		_, err := c.Push(ctx, "big", msgs)
		require.NoError(t, err)
	}
	wantGroups := []string{"a", "b", "c"}
	for _, g := range wantGroups {
		_, err := c.Pop(ctx, "big", comb.PopOptions{Group: g, Max: 1})
		require.NoError(t, err)
	}

	// One raw request, as `nats req comb.info.big ''` sends it.
	request := func(subject, body string) []byte {
		t.Helper()
		m, err := env.NC.Request(subject, []byte(body), 10*time.Second)
		require.NoError(t, err, subject)
		require.Empty(t, m.Header.Get(protocol.HeaderErrorCode), "%s %s: %s", subject, body, m.Data)
		require.LessOrEqual(t, len(m.Data), maxPayload)
		return m.Data
	}
	var first protocol.Info
	require.NoError(t, json.Unmarshal(request("comb.info.big", ""), &first))
	require.Equal(t, int64(1200), first.PartitionCount)
	require.Equal(t, int64(3), first.GroupCount)
	require.Equal(t, int64(1200), first.Messages)
	require.NotEmpty(t, first.Next)
	require.Less(t, len(first.Partitions), 1200, "the first page stops at max_payload")
	require.Empty(t, first.Groups, "groups follow the partitions that did not fit")

	// Walking the pages by hand, with a small limit.
	var parts, groups []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000)
		var page protocol.Info
		require.NoError(t, json.Unmarshal(request("comb.info.big", fmt.Sprintf(`{"limit":500,"after":%q}`, after)), &page))
		require.LessOrEqual(t, len(page.Partitions), 500)
		require.Equal(t, first.Messages, page.Messages, "every page carries the whole queue's figures")
		for _, p := range page.Partitions {
			parts = append(parts, p.Name)
		}
		for _, g := range page.Groups {
			groups = append(groups, g.Name)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	require.Equal(t, wantParts, parts)
	require.Equal(t, wantGroups, groups)

	// The client reads every page for Info.
	info, err := c.Info(ctx, "big")
	require.NoError(t, err)
	require.Len(t, info.Partitions, 1200)
	require.Len(t, info.Groups, 3)
	require.Empty(t, info.Next)
	for _, g := range info.Groups {
		require.Equal(t, int64(1200), g.Pending, "group %s completed nothing", g.Name)
		require.Equal(t, int64(1), g.Leased, "group %s leased one partition", g.Name)
	}

	// 40 queues with long names: list pages of 7.
	var wantQueues []string
	for i := range 40 {
		name := fmt.Sprintf("%s.q%02d", strings.Repeat("n", 200), i)
		wantQueues = append(wantQueues, name)
		_, err := c.Configure(ctx, name, comb.ConfigPatch{})
		require.NoError(t, err)
	}
	wantQueues = append([]string{"big"}, wantQueues...)
	var queues []string
	after = ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		var page protocol.ListReply
		require.NoError(t, json.Unmarshal(request("comb.list", fmt.Sprintf(`{"limit":7,"after":%q}`, after)), &page))
		require.LessOrEqual(t, len(page.Queues), 7)
		for _, q := range page.Queues {
			queues = append(queues, q.Name)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	require.Equal(t, wantQueues, queues)
	all, err := c.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 41)

	// A cursor that is not one is a 400, naming the field.
	m, err := env.NC.Request("comb.info.big", []byte(`{"after":"forged"}`), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", m.Header.Get(protocol.HeaderErrorCode))
	require.Contains(t, string(m.Data), "after: not a cursor of an info reply")
}
