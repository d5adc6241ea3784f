package embeddednats

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"

	"github.com/nats-io/nats.go"
)

// certMinter gives Comb's own users client certificates when the client
// listener maps certificates to users (tls { verify_and_map: true }):
// nats-server then takes a client's identity from its certificate only,
// in-process connections included. The certificates come from a CA made
// at start, whose key never leaves the process, and which the listener
// trusts beside the file's ca_file.
type certMinter struct {
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// newCertMinter makes the CA and returns a copy of server that also trusts
// it for client certificates.
func newCertMinter(server *tls.Config) (*certMinter, *tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("embeddednats: in-process CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "comb in-process CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(100, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("embeddednats: in-process CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("embeddednats: in-process CA: %w", err)
	}
	cfg := server.Clone()
	pool := cfg.ClientCAs
	if pool == nil {
		// No ca_file: clients were verified against the system's roots.
		if pool, err = x509.SystemCertPool(); err != nil {
			pool = x509.NewCertPool()
		}
	} else {
		pool = pool.Clone()
	}
	pool.AddCert(ca)
	cfg.ClientCAs = pool
	return &certMinter{ca: ca, caKey: key}, cfg, nil
}

// login returns a client certificate whose subject is CN=name, as the
// in-process connection's TLS option, and the user name nats-server maps
// it to.
func (m *certMinter) login(name string) (user string, opt nats.Option, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, fmt.Errorf("embeddednats: in-process certificate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", nil, fmt.Errorf("embeddednats: in-process certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(100, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.ca, &key.PublicKey, m.caKey)
	if err != nil {
		return "", nil, fmt.Errorf("embeddednats: in-process certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	// The connection is a pipe inside this process: there is no network
	// to check the server's certificate against, and its name may not be
	// the loopback address the in-process URL names.
	opt = nats.Secure(&tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec
	return "CN=" + name, opt, nil
}
