package embeddednats

import (
	"bufio"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/internal/testcerts"
	"github.com/combmq/comb/internal/testenv"
)

// denied runs every attempt the denials must stop.
func denied(t *testing.T, w *testenv.Watched, who string) {
	t.Helper()
	for _, subj := range []string{"comb.push.>", "comb.>", "comb.push.orders", "comb.list", "_COMB.>",
		"_COMB.comb.wake.x", "$SRV.INFO.comb", "$SRV.PING.comb.>"} {
		_, err := w.Subscribe(subj, func(*nats.Msg) {})
		require.NoError(t, err)
		w.Violation(t, who+" subscribes "+subj)
	}
	_, err := w.QueueSubscribe("comb.push.>", "comb", func(*nats.Msg) {})
	require.NoError(t, err)
	w.Violation(t, who+" joins the queue group")
	require.NoError(t, w.Publish("_COMB.comb.wake.x", nil))
	w.Violation(t, who+" publishes a wake-up")
}

const denialsConf = `
authorization {
  users: [
    {user: alice, password: pa}
    {user: bob, password: pb, permissions: {publish: {allow: ["comb.>", "_COMB.>"]}, subscribe: {allow: [">"]}}}
    {user: carol, password: pc}
    {nkey: %s}
  ]
}
`

// TestDenials: once authentication is on, no configured identity but the
// trusted ones may serve or read Comb's subjects, or touch its internal
// ones, whatever the file allows them; Comb's own connection may.
func TestDenials(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))

	s := start(t, Config{Port: -1, Options: fileOptions(t, fmt.Sprintf(denialsConf, pub)), Trusted: []string{"carol"}})
	nkeyOpt, err := nats.NkeyOptionFromSeed(seedFile)
	require.NoError(t, err)
	for who, login := range map[string]nats.Option{"alice": nats.UserInfo("alice", "pa"),
		"bob, allowed everything": nats.UserInfo("bob", "pb"), "an nkey": nkeyOpt} {
		t.Run(who, func(t *testing.T) {
			t.Parallel()
			denied(t, testenv.MustDial(t, s.ClientURL(), login), who)
		})
	}

	// Discovery and requests stay open; a wildcard subscription does not
	// see Comb's traffic.
	alice := testenv.MustDial(t, s.ClientURL(), nats.UserInfo("alice", "pa"))
	all := make(chan string, 10)
	_, err = alice.Subscribe(">", func(m *nats.Msg) { all <- m.Subject })
	require.NoError(t, err)
	require.NoError(t, alice.Publish("$SRV.PING", nil))
	require.NoError(t, alice.Publish("comb.push.orders", nil))
	alice.Allowed(t, "alice publishes requests and pings")
	comb := connect(t, func() (*nats.Conn, error) { return s.Connect() })
	for _, subj := range []string{"comb.push.orders", "_COMB.comb.wake.orders", "other"} {
		require.NoError(t, comb.Publish(subj, nil))
	}
	require.NoError(t, comb.Flush())
	require.NoError(t, alice.Flush())
	got := []string{}
	for len(got) < 2 {
		select {
		case subj := <-all:
			got = append(got, subj)
		case <-time.After(5 * time.Second):
			t.Fatalf("alice's > saw only %v", got)
		}
	}
	require.ElementsMatch(t, []string{"$SRV.PING", "other"}, got)
	require.NoError(t, alice.Flush())
	require.Empty(t, all, "alice's > sees her ping and Comb's other subject, never comb.push or _COMB")

	carol := testenv.MustDial(t, s.ClientURL(), nats.UserInfo("carol", "pc"))
	_, err = carol.QueueSubscribe("comb.push.>", "comb", func(*nats.Msg) {})
	require.NoError(t, err)
	_, err = carol.Subscribe("_COMB.>", func(*nats.Msg) {})
	require.NoError(t, err)
	carol.Allowed(t, "trusted carol")

	_, err = Start(Config{Port: -1, Options: fileOptions(t, fmt.Sprintf(denialsConf, pub)), Trusted: []string{"carl"}})
	require.ErrorContains(t, err, `trusted users ["carl"] match no configured user`)
}

// TestTokenDenials: a token client gets the denials too, plain or bcrypt.
func TestTokenDenials(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Port: -1, Options: fileOptions(t,
		`authorization { token: "$2a$04$eKpWIlefc27RLFmz4XMRZe0JAtsoYTvKh2/2wpGf5x1P9kIUagFLe" }`)})
	_, err := testenv.Dial(t, s.ClientURL(), nats.Token("wrong"))
	require.ErrorContains(t, err, "Authorization Violation")
	denied(t, testenv.MustDial(t, s.ClientURL(), nats.Token("pw")), "a token client")
	comb := connect(t, func() (*nats.Conn, error) { return s.Connect() })
	_, err = comb.Subscribe("comb.push.>", func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, comb.Flush())

	// A single user becomes a users entry, with the denials.
	s = start(t, Config{Port: -1, Username: "u", Password: "p"})
	denied(t, testenv.MustDial(t, s.ClientURL(), nats.UserInfo("u", "p")), "the single user")
}

// TestRefused: wrong passwords and unknown nkeys do not get in; an
// nkeys-only configuration still lets Comb's own connection in.
func TestRefused(t *testing.T) {
	t.Parallel()
	known, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := known.PublicKey()
	require.NoError(t, err)
	stranger, err := nkeys.CreateUser()
	require.NoError(t, err)
	s := start(t, Config{Port: -1, Options: fileOptions(t, fmt.Sprintf(`authorization { users: [ {nkey: %s} ] }`, pub))})
	require.Equal(t, []string{""}, s.Tenants())
	comb := connect(t, func() (*nats.Conn, error) { return s.Connect() })
	require.NoError(t, comb.Flush())

	signed := func(kp nkeys.KeyPair) nats.Option {
		p, err := kp.PublicKey()
		require.NoError(t, err)
		return nats.Nkey(p, kp.Sign)
	}
	w := testenv.MustDial(t, s.ClientURL(), signed(known))
	denied(t, w, "the nkey")
	_, err = testenv.Dial(t, s.ClientURL(), signed(stranger))
	require.ErrorContains(t, err, "Authorization Violation", "an unknown nkey")
	_, err = testenv.Dial(t, s.ClientURL(), nats.UserInfo("_comb_x", "guess"))
	require.ErrorContains(t, err, "Authorization Violation", "a guessed user")

	s = start(t, Config{Port: -1, Options: fileOptions(t,
		`authorization { users: [ {user: alice, password: "$2a$04$eKpWIlefc27RLFmz4XMRZe0JAtsoYTvKh2/2wpGf5x1P9kIUagFLe"} ] }`)})
	_, err = testenv.Dial(t, s.ClientURL(), nats.UserInfo("alice", "wrong"))
	require.ErrorContains(t, err, "Authorization Violation", "a wrong password")
	testenv.MustDial(t, s.ClientURL(), nats.UserInfo("alice", "pw"))
}

// TestTLSOnly: a listener with TLS refuses a plain client and serves a
// TLS one; Comb's own connection needs none.
func TestTLSOnly(t *testing.T) {
	t.Parallel()
	certs := testcerts.New(t, t.TempDir())
	s := start(t, Config{Port: -1, Options: fileOptions(t, fmt.Sprintf(`
tls { cert_file: %q, key_file: %q }
authorization { users: [ {user: alice, password: pa} ] }`, certs.Server, certs.ServerKey))})
	// A client that speaks plain NATS after the INFO line is cut off.
	raw, err := net.Dial("tcp", s.NATS().Addr().String())
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(raw)
	info, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, info, `"tls_required":true`)
	_, err = raw.Write([]byte("CONNECT {\"user\":\"alice\",\"pass\":\"pa\"}\r\nPING\r\n"))
	require.NoError(t, err)
	rest, _ := io.ReadAll(r)
	require.NotContains(t, string(rest), "PONG", "a plain client")
	// nats.go switches to TLS itself; without the CA it does not trust us.
	_, err = testenv.Dial(t, s.ClientURL(), nats.UserInfo("alice", "pa"))
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	w := testenv.MustDial(t, s.ClientURL(), nats.UserInfo("alice", "pa"), nats.Secure(certs.ClientTLS(t, "", "")))
	require.NoError(t, w.Flush())
	comb := connect(t, func() (*nats.Conn, error) { return s.Connect() })
	require.NoError(t, comb.Flush())
}

// TestVerifyAndMap: with mutual TLS mapping certificates to users, a
// client's certificate is its identity and carries its user's permissions
// and Comb's denials; Comb's own connections, in the global account and
// in a tenant account, get in with certificates of their own.
func TestVerifyAndMap(t *testing.T) {
	t.Parallel()
	certs := testcerts.New(t, t.TempDir())
	aliceCert, aliceKey := certs.Client(t, "alice", pkix.Name{CommonName: "alice"}, "alice@example.com")
	eveCert, eveKey := certs.Client(t, "eve", pkix.Name{CommonName: "eve"}, "eve@example.com")
	s := start(t, Config{Port: -1, Options: fileOptions(t, fmt.Sprintf(`
tls { cert_file: %q, key_file: %q, ca_file: %q, verify_and_map: true }
accounts {
  APP: { users: [ {user: "alice@example.com", permissions: {publish: ["comb.push.orders"], subscribe: ["_INBOX.>", "comb.>"]}} ] }
}
authorization { users: [ {user: "CN=ops"} ] }`, certs.Server, certs.ServerKey, certs.CA))})
	require.Equal(t, []string{"", "APP"}, s.Tenants())
	for _, tenant := range s.Tenants() {
		comb := connect(t, func() (*nats.Conn, error) { return s.ConnectTenant(tenant) })
		require.NoError(t, comb.Flush())
	}

	_, err := testenv.Dial(t, s.ClientURL(), nats.Secure(certs.ClientTLS(t, "", "")))
	require.Error(t, err, "no client certificate")
	_, err = testenv.Dial(t, s.ClientURL(), nats.Secure(certs.ClientTLS(t, eveCert, eveKey)))
	require.ErrorContains(t, err, "Authorization Violation", "a certificate of the CA that maps to no user")

	alice := testenv.MustDial(t, s.ClientURL(), nats.Secure(certs.ClientTLS(t, aliceCert, aliceKey)))
	require.NoError(t, alice.Publish("comb.push.orders", nil))
	alice.Allowed(t, "alice pushes to orders")
	require.NoError(t, alice.Publish("comb.pop.orders", nil))
	alice.Violation(t, "alice pops")
	_, err = alice.Subscribe("comb.>", func(*nats.Msg) {})
	require.NoError(t, err)
	alice.Violation(t, "alice subscribes comb.> though the file allows it")

	// Comb's user in APP serves alice.
	comb := connect(t, func() (*nats.Conn, error) { return s.ConnectTenant("APP") })
	_, err = comb.Subscribe("comb.push.orders", func(m *nats.Msg) { _ = m.Respond([]byte("stored")) })
	require.NoError(t, err)
	require.NoError(t, comb.Flush())
	reply, err := alice.Request("comb.push.orders", nil, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "stored", string(reply.Data))
	require.False(t, strings.Contains(fmt.Sprint(s.opts.Users), "password"))
}
