package embeddednats

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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

// inProcessAuth returns how Comb's in-process connections authenticate to
// a server built from opts, and adds Comb's own users to opts when only a
// user of its own can get in: a users or nkeys list (accounts' users land
// there too), or a single user whose password is a bcrypt hash. Comb gets
// one user in the global account, where the broker's internal traffic
// runs, and one in every tenant account.
func inProcessAuth(opts *server.Options) (*access, error) {
	if len(opts.TrustedOperators) > 0 || opts.AuthCallout != nil {
		// Neither takes a locally configured user; the tenancy work gives
		// the broker a credential of its own for them.
		return nil, errors.New("embeddednats: operator (JWT) mode and auth callout are not supported yet: " +
			"the broker's own connection needs a user from the configuration")
	}
	global := func(login ...nats.Option) *access {
		return &access{logins: map[string][]nats.Option{"": login}, tenants: []string{""}}
	}
	bcrypted := func(s string) bool { return bcryptRE.MatchString(s) }
	switch {
	case opts.Authorization != "":
		if bcrypted(opts.Authorization) {
			return nil, errors.New("embeddednats: a bcrypt-hashed token leaves the broker's own connection " +
				"no way in; use a plain token or a users list")
		}
		return global(nats.Token(opts.Authorization)), nil
	case opts.Username != "" && len(opts.Users) == 0 && len(opts.Nkeys) == 0 && !bcrypted(opts.Password):
		return global(nats.UserInfo(opts.Username, opts.Password)), nil
	case opts.Username == "" && len(opts.Users) == 0 && len(opts.Nkeys) == 0:
		return global(), nil // no authentication
	}
	// nats-server refuses a single user next to a users list: make it one.
	if opts.Username != "" {
		opts.Users = append(opts.Users, &server.User{Username: opts.Username, Password: opts.Password})
		opts.Username, opts.Password = "", ""
	}

	// The tenants: every account a configured user or nkey lands in, the
	// system account aside. A user without an account is in $G.
	accounts := map[string]*server.Account{}
	inGlobal := false
	sys := opts.SystemAccount
	note := func(acc *server.Account) {
		switch {
		case acc == nil || acc.Name == server.DEFAULT_GLOBAL_ACCOUNT:
			inGlobal = true
		case acc.Name == sys || acc.Name == server.DEFAULT_SYSTEM_ACCOUNT:
		default:
			accounts[acc.Name] = acc
		}
	}
	for _, u := range opts.Users {
		note(u.Account)
	}
	for _, u := range opts.Nkeys {
		note(u.Account)
	}

	a := &access{logins: map[string][]nats.Option{}}
	if inGlobal || len(accounts) == 0 {
		a.tenants = append(a.tenants, "")
	}
	// Nil permissions allow everything; default_permissions were applied
	// to the file's users when it was parsed, not to these.
	add := func(tenant string, acc *server.Account) error {
		name, err := randomToken(8)
		if err != nil {
			return err
		}
		pass, err := randomToken(24)
		if err != nil {
			return err
		}
		name = combUserPrefix + name
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
