package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

func TestDecodeGroups(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, `{}`, ` { } `, `{"delete":null}`} {
		g, err := DecodeGroups([]byte(body))
		require.NoError(t, err, body)
		require.Empty(t, g, body)
	}
	g, err := DecodeGroups([]byte(`{"delete":"billing"}`))
	require.NoError(t, err)
	require.Equal(t, "billing", g)

	bad := map[string]string{
		`{"delete":""}`:          "delete: the group to delete is required",
		`{"delete":7}`:           "delete",
		`{"group":"g"}`:          "group",
		`[]`:                     "object",
		"{\"delete\":\"g\xff\"}": "delete",
		`{"delete":"` + strings.Repeat("g", protocol.MaxNameBytes+1) + `"}`: "delete",
		`{"delete":"a\u0000"}`: "delete",
	}
	for body, want := range bad {
		_, err := DecodeGroups([]byte(body))
		we, ok := protocol.AsError(err)
		require.True(t, ok, "%s: %v", body, err)
		require.Equal(t, protocol.CodeBadRequest, we.Code, body)
		require.Contains(t, we.Message, want, body)
	}
}

func TestGroupsReply(t *testing.T) {
	t.Parallel()
	var rep protocol.GroupsReply
	require.NoError(t, json.Unmarshal(GroupsReply(nil), &rep))
	require.NotNil(t, rep.Groups, "an empty listing is [], not null")
	require.JSONEq(t, `{"groups":[]}`, string(GroupsReply(nil)))

	out := GroupsReply([]domain.GroupState{{Name: "a", Pending: 3, Leased: 1, Dead: 2, OldestPendingAge: 1500 * time.Millisecond}})
	require.JSONEq(t, `{"groups":[{"name":"a","pending":3,"leased":1,"dead":2,"oldest_pending_age_s":1.5}]}`, string(out))
}
