// Package tlstest makes certificate authorities and server certificates for
// the tests of code that speaks TLS: a master serving HTTPS and the clients
// that verify it. Everything is generated with crypto/x509 in the test (ECDSA
// P-256, quick to make) and written as PEM files, as an operator would have
// them. It owns no TLS configuration of its own; packages master and client
// load the files as they load an operator's.
//
//	ca := tlstest.NewCA(t, "job CA")
//	files := ca.WriteServer(t, t.TempDir(), "127.0.0.1", "localhost")
//	// rover master --tls-cert files.Cert --tls-key files.Key
//	// rover run --tls-ca files.CA ...
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that signs server certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate: the bundle a client verifies with.
	PEM []byte
}

// Files are the paths of PEM files written by WriteServer.
type Files struct {
	CA   string // the CA's certificate (what `--tls-ca` takes)
	Cert string // the server's certificate (`--tls-cert`)
	Key  string // the server's private key (`--tls-key`)
}

// NewCA makes a self-signed certificate authority named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parse CA certificate: %v", err)
	}
	return &CA{cert: cert, key: key, PEM: pemBlock("CERTIFICATE", der)}
}

// Issue signs a server certificate for hosts (DNS names or IP addresses),
// valid from an hour ago to a day from now, and returns it and its key as
// PEM.
func (ca *CA) Issue(t testing.TB, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	return ca.IssueValid(t, now.Add(-time.Hour), now.Add(24*time.Hour), hosts...)
}

// IssueValid is Issue with the given validity period.
func (ca *CA) IssueValid(t testing.TB, notBefore, notAfter time.Time, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "rover master"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("tlstest: create server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: encode server key: %v", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER)
}

// WriteServer issues a server certificate for hosts and writes the CA's
// certificate, the server's certificate and its key (mode 0600) into dir.
func (ca *CA) WriteServer(t testing.TB, dir string, hosts ...string) Files {
	t.Helper()
	cert, key := ca.Issue(t, hosts...)
	f := Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	WriteFile(t, f.CA, ca.PEM)
	WriteFile(t, f.Cert, cert)
	WriteFile(t, f.Key, key)
	return f
}

// WriteFile writes data to path with mode 0600, failing the test on error.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: generate key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("tlstest: serial number: %v", err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
