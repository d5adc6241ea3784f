package embeddednats

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/combmq/comb/protocol"
)

// access is how Comb's own connections authenticate: a login per tenant
// ("" is the global account, which always has one, nil when the server
// requires no authentication), and the tenants the server serves.
type access struct {
	logins  map[string][]nats.Option
	tenants []string
}

// combUserPrefix begins the name of every user Comb adds for itself.
const combUserPrefix = "_comb_"

// Denials returns the subjects Comb denies to every configured user and
// nkey but its own and the trusted ones, once any authentication is on:
// subscribing to its service subjects (prefix.>) and to the micro
// framework's subjects of its service ($SRV.<verb>.comb and below), so no
// one can answer in its place or read requests; and publishing or
// subscribing on its internal subjects (protocol.InternalPrefix.>).
// Discovery ($SRV.PING, ...) stays open to publish: clients may look.
func Denials(prefix string) (publish, subscribe []string) {
	if prefix == "" {
		prefix = protocol.DefaultPrefix
	}
	internal := protocol.InternalPrefix + ".>"
	return []string{internal}, []string{
		prefix + ".>",
		"$SRV.*." + protocol.ServiceName,
		"$SRV.*." + protocol.ServiceName + ".>",
		internal,
	}
}

// inProcessAuth returns how Comb's in-process connections authenticate to
// a server built from opts, and, once opts configure any authentication,
// makes the server Comb's: every configured user and nkey but the trusted
// ones gets Denials, whatever permissions the file gave it, and Comb adds
// users of its own, with nil permissions (everything allowed): one in the
// global account, where the broker's internal traffic runs, and one in
// every tenant account. A single user or token, which nats-server keeps
// without permissions, becomes a user with them.
func inProcessAuth(opts *server.Options, prefix string, trusted []string) (*access, error) {
	if len(opts.TrustedOperators) > 0 || opts.AuthCallout != nil {
		// Neither takes a locally configured user; the tenancy work gives
		// the broker a credential of its own for them.
		return nil, errors.New("embeddednats: operator (JWT) mode and auth callout are not supported yet: " +
			"the broker's own connection needs a user from the configuration")
	}
	if opts.CustomClientAuthentication != nil {
		return nil, errors.New("embeddednats: custom client authentication is not supported")
	}
	a := &access{logins: map[string][]nats.Option{}}
	if opts.Authorization == "" && opts.Username == "" && len(opts.Users) == 0 && len(opts.Nkeys) == 0 {
		if len(trusted) > 0 {
			return nil, fmt.Errorf("embeddednats: trusted users %q, but the configuration has no authentication", trusted)
		}
		a.logins[""], a.tenants = nil, []string{""}
		return a, nil
	}
	pub, sub := Denials(prefix)
	trust := map[string]bool{}
	for _, name := range trusted {
		trust[name] = false
	}
	isTrusted := func(name string) bool {
		_, ok := trust[name]
		if ok {
			trust[name] = true
		}
		return ok
	}

	if opts.Authorization != "" {
		// A token client sends no name, so it cannot be one of a users
		// list: a custom authenticator gives it the denials, and lets in
		// Comb's own user. The parser allows nothing next to a token.
		tok := &tokenAuth{token: opts.Authorization, client: &server.User{Permissions: deny(nil, pub, sub)}}
		name, pass, err := newLogin()
		if err != nil {
			return nil, err
		}
		tok.comb = &server.User{Username: name, Password: pass}
		opts.CustomClientAuthentication = tok
		opts.Authorization = ""
		a.logins[""], a.tenants = []nats.Option{nats.UserInfo(name, pass)}, []string{""}
		return a, unusedTrust(trust)
	}
	// nats-server keeps a single user without permissions, and refuses one
	// next to a users list: make it one.
	if opts.Username != "" {
		opts.Users = append(opts.Users, &server.User{Username: opts.Username, Password: opts.Password})
		opts.Username, opts.Password = "", ""
	}

	// The tenants: every account a configured user or nkey lands in, the
	// system account aside. A user without an account is in $G.
	accounts := map[string]*server.Account{}
	inGlobal := false
	note := func(acc *server.Account) {
		switch {
		case acc == nil || acc.Name == server.DEFAULT_GLOBAL_ACCOUNT:
			inGlobal = true
		case acc.Name == opts.SystemAccount || acc.Name == server.DEFAULT_SYSTEM_ACCOUNT:
		default:
			accounts[acc.Name] = acc
		}
	}
	for _, u := range opts.Users {
		note(u.Account)
		if !isTrusted(u.Username) {
			u.Permissions = deny(u.Permissions, pub, sub)
		}
	}
	for _, u := range opts.Nkeys {
		note(u.Account)
		if !isTrusted(u.Nkey) {
			u.Permissions = deny(u.Permissions, pub, sub)
		}
	}
	if err := unusedTrust(trust); err != nil {
		return nil, err
	}

	if inGlobal || len(accounts) == 0 {
		a.tenants = append(a.tenants, "")
	}
	var certs *certMinter
	if opts.TLSMap && opts.TLSConfig != nil {
		var err error
		if certs, opts.TLSConfig, err = newCertMinter(opts.TLSConfig); err != nil {
			return nil, err
		}
	}
	// default_permissions were applied to the file's users when it was
	// parsed, not to these.
	add := func(tenant string, acc *server.Account) error {
		name, pass, err := newLogin()
		if err != nil {
			return err
		}
		if certs != nil {
			user, login, err := certs.login(name)
			if err != nil {
				return err
			}
			opts.Users = append(opts.Users, &server.User{Username: user, Account: acc})
			a.logins[tenant] = []nats.Option{login}
			return nil
		}
		opts.Users = append(opts.Users, &server.User{Username: name, Password: pass, Account: acc})
		a.logins[tenant] = []nats.Option{nats.UserInfo(name, pass)}
		return nil
	}
	// No account: the global user lands in $G, where the broker's internal
	// traffic (wake-ups) runs.
	if err := add("", nil); err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(accounts) {
		// The account the parser made, which opts.Accounts holds: the
		// server registers it under its name and maps users to it.
		if err := add(name, accounts[name]); err != nil {
			return nil, err
		}
		a.tenants = append(a.tenants, name)
	}
	return a, nil
}

// unusedTrust reports trusted names that match no user, nkey or token:
// most likely a typo, which would leave the intended identity denied.
func unusedTrust(trust map[string]bool) error {
	var unused []string
	for name, used := range trust {
		if !used {
			unused = append(unused, name)
		}
	}
	if len(unused) == 0 {
		return nil
	}
	slices.Sort(unused)
	return fmt.Errorf("embeddednats: trusted users %q match no configured user or nkey", unused)
}

// deny adds pub and sub to p's deny lists, creating what is missing and
// keeping every allow: in nats-server a deny wins over any allow, and an
// absent allow list allows everything else.
func deny(p *server.Permissions, pub, sub []string) *server.Permissions {
	if p == nil {
		p = &server.Permissions{}
	}
	add := func(sp **server.SubjectPermission, subjects []string) {
		if *sp == nil {
			*sp = &server.SubjectPermission{}
		}
		for _, s := range subjects {
			if !slices.Contains((*sp).Deny, s) {
				(*sp).Deny = append((*sp).Deny, s)
			}
		}
	}
	add(&p.Publish, pub)
	add(&p.Subscribe, sub)
	return p
}

// tokenAuth authenticates a token-only server: a client with the token
// becomes client (with the denials), Comb's own user comb.
type tokenAuth struct {
	token  string
	client *server.User
	comb   *server.User
}

// Check is server.Authentication's.
func (t *tokenAuth) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	switch {
	case o.Username != "":
		if o.Username == t.comb.Username && equal(o.Password, t.comb.Password) {
			c.RegisterUser(t.comb)
			return true
		}
	case o.Token != "":
		if matchSecret(t.token, o.Token) {
			c.RegisterUser(t.client)
			return true
		}
	}
	return false
}

// matchSecret compares a secret from the configuration, plain or a bcrypt
// hash as nats-server allows, with what a client sent.
func matchSecret(configured, sent string) bool {
	if bcryptRE.MatchString(configured) {
		return bcrypt.CompareHashAndPassword([]byte(configured), []byte(sent)) == nil
	}
	return equal(configured, sent)
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// newLogin makes a name and password for one of Comb's own users.
func newLogin() (name, pass string, err error) {
	if name, err = randomToken(8); err != nil {
		return "", "", err
	}
	if pass, err = randomToken(24); err != nil {
		return "", "", err
	}
	return combUserPrefix + name, pass, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// bcryptRE is nats-server's test for a bcrypt-hashed secret.
var bcryptRE = regexp.MustCompile(`^\$2[abxy]\$\d{2}\$.*`)

func randomToken(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("embeddednats: random credential: %w", err)
	}
	return hex.EncodeToString(b), nil
}
