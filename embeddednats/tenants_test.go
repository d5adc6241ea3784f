package embeddednats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// tenantsConf has two tenant accounts, a system account with a user of
// its own, and a user without an account, who lands in $G.
const tenantsConf = `
accounts {
  A: { users: [ {user: a, password: pa} ] }
  B: { users: [ {user: b, password: pb} ] }
  EMPTY: {}
  SYS: { users: [ {user: sys, password: psys} ] }
}
system_account: SYS
authorization { users: [ {user: g, password: pg} ] }
`

// TestTenants: every account with users but the system account is a
// tenant, "" only when users land in $G; ConnectTenant reaches the
// tenant's own clients and nobody else's.
func TestTenants(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Port: -1, Options: fileOptions(t, tenantsConf)})
	require.Equal(t, []string{"", "A", "B"}, s.Tenants())

	login := func(user, pass string) *nats.Conn {
		return connect(t, func() (*nats.Conn, error) {
			return nats.Connect(s.ClientURL(), nats.UserInfo(user, pass), nats.MaxReconnects(0))
		})
	}
	a, b, g := login("a", "pa"), login("b", "pb"), login("g", "pg")

	// Each tenant's clients see what is published in their account only.
	seen := map[string]chan string{}
	for name, nc := range map[string]*nats.Conn{"a": a, "b": b, "g": g} {
		ch := make(chan string, 10)
		seen[name] = ch
		_, err := nc.Subscribe("orders", func(m *nats.Msg) { ch <- string(m.Data) })
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
	}
	for _, tenant := range []string{"B", "A", ""} {
		nc := connect(t, func() (*nats.Conn, error) { return s.ConnectTenant(tenant, nats.Name("comb-"+tenant)) })
		require.NoError(t, nc.Publish("orders", []byte("to "+tenant)))
		require.NoError(t, nc.Flush())
	}
	require.NoError(t, b.Publish("orders", []byte("from b")))
	require.NoError(t, b.Flush())
	expect := map[string][]string{"a": {"to A"}, "b": {"to B", "from b"}, "g": {"to "}}
	for name, want := range expect {
		for _, w := range want {
			select {
			case got := <-seen[name]:
				require.Equal(t, w, got, name)
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: no %q", name, w)
			}
		}
	}
	// A round trip per client flushes anything that would still arrive.
	for name, nc := range map[string]*nats.Conn{"a": a, "b": b, "g": g} {
		require.NoError(t, nc.Flush())
		require.Empty(t, seen[name], "%s sees another tenant's message", name)
	}

	for _, name := range []string{"SYS", "EMPTY", "C"} {
		_, err := s.ConnectTenant(name)
		require.ErrorContains(t, err, "no tenant", name)
	}
}

func TestTenantsWithoutGlobalUsers(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		conf string
		want []string
	}{
		"accounts only": {`accounts { A: { users: [ {user: a, password: pa} ] }, B: { users: [ {user: b, password: pb} ] } }`,
			[]string{"A", "B"}},
		"nkey in an account": {`accounts { A: { users: [ {nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4} ] } }`,
			[]string{"A"}},
		"no authentication":      {`server_name: plain`, []string{""}},
		"token":                  {`authorization { token: t0ken }`, []string{""}},
		"accounts without users": {`accounts { A: {} }`, []string{""}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t, Config{Port: -1, Options: fileOptions(t, tc.conf)})
			require.Equal(t, tc.want, s.Tenants())
			for _, tenant := range append(tc.want, "") {
				nc := connect(t, func() (*nats.Conn, error) { return s.ConnectTenant(tenant) })
				require.NoError(t, nc.Flush())
			}
		})
	}
}
