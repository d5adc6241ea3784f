package store_test

import (
	"context"
	"github.com/jackc/pgx/v5/pgxpool"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/store"
)

// TestConnectTimeoutDefault: a URL without connect_timeout still gives up
// on a server that accepts the connection and never answers (a port some
// other program took) after store.DefaultConnectTimeout, with
// ErrUnavailable, well before the caller's own deadline.
func TestConnectTimeoutDefault(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		var held []net.Conn // accepted and never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, "postgres://comb:x@"+l.Addr().String()+"/comb?sslmode=disable", store.Options{})
	require.NoError(t, err)
	defer st.Close()
	began := time.Now()
	err = st.Ping(ctx)
	took := time.Since(began)
	require.ErrorIs(t, err, domain.ErrUnavailable)
	require.GreaterOrEqual(t, took, store.DefaultConnectTimeout)
	require.Less(t, took, 4*store.DefaultConnectTimeout, "the caller's 60 s deadline did not bound it")
}

// TestConnectionsLiveUntilTheyFail: both pools keep a connection for its
// life unless the URL names pool_max_conn_lifetime (pgx's default, an
// hour, replaced every connection at about the same moment), and then
// follow the URL.
func TestConnectionsLiveUntilTheyFail(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	lifetimes := func(url string) []time.Duration {
		st, err := store.Open(ctx, url, store.Options{MaxConns: 2})
		require.NoError(t, err)
		defer st.Close()
		return []time.Duration{st.Pool().Config().MaxConnLifetime, st.PopPool().Config().MaxConnLifetime}
	}
	url := testURL(t)
	require.Equal(t, []time.Duration{0, 0}, lifetimes(url))
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	require.Equal(t, []time.Duration{90 * time.Second, 90 * time.Second}, lifetimes(url+sep+"pool_max_conn_lifetime=90s"))
}

// Comb's connections run without JIT unless the URL sets jit: PostgreSQL
// compiled a sweep statement on every run for much longer than it ran.
func TestConnectionsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	jit := func(url string) []string {
		st, err := store.Open(ctx, url, store.Options{MaxConns: 2})
		require.NoError(t, err)
		defer st.Close()
		var out []string
		for _, p := range []*pgxpool.Pool{st.Pool(), st.PopPool()} {
			var v string
			require.NoError(t, p.QueryRow(ctx, `SHOW jit`).Scan(&v))
			out = append(out, v)
		}
		return out
	}
	url := testURL(t)
	require.Equal(t, []string{"off", "off"}, jit(url))
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	require.Equal(t, []string{"on", "on"}, jit(url+sep+"jit=on"))
}
