// Package testcerts writes a certificate authority, a server certificate
// for the loopback addresses and client certificates into a directory, for
// tests of TLS and mutual TLS (verify_and_map) against a real server.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Set is a CA in Dir: CA is its certificate's file, and Server and
// ServerKey a certificate for localhost, 127.0.0.1 and ::1 it signed.
type Set struct {
	Dir       string
	CA        string
	Server    string
	ServerKey string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// New writes a CA and a server certificate into dir: ca.pem, server.pem,
// server-key.pem.
func New(t testing.TB, dir string) *Set {
	t.Helper()
	s, err := Write(dir)
	require.NoError(t, err)
	return s
}

// Write is New for code without a test at hand, such as a fixture.
func Write(dir string) (s *Set, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("testcerts: %v", r)
		}
	}()
	t := panicker{}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "comb test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	s = &Set{Dir: dir, CA: filepath.Join(dir, "ca.pem"), ca: ca, caKey: key}
	writePEM(t, s.CA, "CERTIFICATE", der)
	s.Server, s.ServerKey = s.issue(t, "server", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return s, nil
}

// panicker is a testing.TB whose failures panic, for Write.
type panicker struct{ testing.TB }

func (panicker) Helper()                           {}
func (panicker) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (panicker) FailNow()                          { panic("failed") }

// Client writes a client certificate with the subject and email addresses
// given, as name.pem and name-key.pem, and returns the files.
func (s *Set) Client(t testing.TB, name string, subject pkix.Name, emails ...string) (cert, key string) {
	t.Helper()
	return s.issue(t, name, &x509.Certificate{
		Subject:        subject,
		EmailAddresses: emails,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// ClientTLS returns a client TLS configuration trusting the CA and
// presenting cert, when cert is not "".
func (s *Set) ClientTLS(t testing.TB, cert, key string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(s.ca)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

func (s *Set) issue(t testing.TB, name string, tmpl *x509.Certificate) (cert, key string) {
	t.Helper()
	k := newKey(t)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &k.PublicKey, s.caKey)
	require.NoError(t, err)
	cert, key = filepath.Join(s.Dir, name+".pem"), filepath.Join(s.Dir, name+"-key.pem")
	writePEM(t, cert, "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	writePEM(t, key, "EC PRIVATE KEY", kder)
	return cert, key
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}
