package broker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A configuration file that includes itself, directly or through another,
// is an error naming the chain, not a stack overflow in nats-server's
// parser; includes that do not loop load as before.
func TestLoadFileIncludeCycle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	self := write("self.conf", "include \"self.conf\"\n")
	a := write("a.conf", "server_name: a\ninclude b.conf\n")
	write("b.conf", "cluster {\n  name: comb\n  include 'a.conf'\n}\n")
	deep := write("deep.conf", "include deep.conf;\n")
	for _, p := range []string{self, a, deep} {
		c := DefaultConfig()
		_, err := c.LoadFile(p)
		require.ErrorContains(t, err, "includes itself", p)
	}

	write("base.conf", "max_payload: 1MB\n")
	top := write("top.conf", "include \"base.conf\"\nserver_name: top\n")
	c := DefaultConfig()
	_, err := c.LoadFile(top)
	require.NoError(t, err)
	require.Equal(t, "top", c.NATS.Options.ServerName)
	require.EqualValues(t, 1<<20, c.NATS.Options.MaxPayload)
}
