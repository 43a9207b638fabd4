package master

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/userfile"
)

// A master serves TLS when Config.TLS is set (`rover master --tls-cert
// --tls-key`): HTTP/2 over TLS, ALPN h2 (and HTTP/1.1 for Connect's JSON
// protocol). Its port still answers cleartext clients, only to tell them
// what is wrong: connections are told apart by their first byte (a TLS
// handshake record starts with 0x16), and every cleartext request gets
// FailedPrecondition with a message that names --tls-ca, in the protocol
// the client speaks, before anything reads its body. Without that, a
// cleartext gRPC client would see its connection closed and retry until its
// join timeout.

// errCleartext answers a cleartext request to a master that serves TLS.
var errCleartext = errors.New("this master serves TLS (https) and the client spoke cleartext: " +
	"give the client the CA bundle that signed the master's certificate (rover run and rover status: --tls-ca FILE)")

// refuseCleartext answers every request with errCleartext.
func refuseCleartext() http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.Body.Close() // unread, as for a request without the token
		_ = errs.Write(w, r, connect.NewError(connect.CodeFailedPrecondition, errCleartext))
	})
}

// LoadKeyPair reads the master's TLS certificate (PEM, the server's
// certificate first, then any intermediates) and its private key (PEM) and
// checks that they belong together and that the certificate is valid at now.
// Every error names the file at fault and says what to do.
func LoadKeyPair(certFile, keyFile string, now time.Time) (tls.Certificate, error) {
	certPEM, err := userfile.Read(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read the master's TLS certificate: %w; pass --tls-cert a PEM file of the master's certificate", err)
	}
	keyPEM, err := userfile.Read(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("read the master's TLS key: %w; pass --tls-key the PEM file of the certificate's private key", err)
	}
	certTypes, keyTypes := pemTypes(certPEM), pemTypes(keyPEM)
	switch {
	case !slices.Contains(certTypes, "CERTIFICATE") && slices.Contains(keyTypes, "CERTIFICATE") && hasKey(certTypes):
		return tls.Certificate{}, fmt.Errorf("--tls-cert %s holds a private key and --tls-key %s a certificate: swap them", certFile, keyFile)
	case !slices.Contains(certTypes, "CERTIFICATE"):
		return tls.Certificate{}, fmt.Errorf("--tls-cert %s holds no PEM certificate (-----BEGIN CERTIFICATE-----); pass the master's certificate", certFile)
	case !hasKey(keyTypes):
		return tls.Certificate{}, fmt.Errorf("--tls-key %s holds no PEM private key (-----BEGIN PRIVATE KEY-----, or an RSA or EC one); pass the certificate's private key", keyFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, fmt.Errorf("the private key in %s is not the key of the certificate in %s: pass the key the certificate was issued for", keyFile, certFile)
		}
		return tls.Certificate{}, fmt.Errorf("load the TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	switch leaf := cert.Leaf; {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("the certificate in %s expired at %s: renew it", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("the certificate in %s is not valid before %s: check this machine's clock, or issue one valid now", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

// pemTypes lists the types of the PEM blocks in b.
func pemTypes(b []byte) []string {
	var types []string
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return types
		}
		types = append(types, block.Type)
		b = bytes.TrimSpace(b)
	}
}

func hasKey(types []string) bool {
	for _, x := range types {
		if strings.HasSuffix(x, "PRIVATE KEY") {
			return true
		}
	}
	return false
}
