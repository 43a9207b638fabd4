package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/roverml/rover/internal/userfile"
)

// TLS says how a client reaches a master. The zero value is cleartext HTTP/2
// (h2c), what `rover master` serves without --tls-cert; with CAFile set the
// client speaks HTTP/2 over TLS (https) and verifies the master's certificate
// against the CAs in that file only, not the system's roots. The address of a
// master stays HOST:PORT either way: the CA bundle alone says TLS.
type TLS struct {
	// CAFile is a PEM file of the certificate authorities that sign the
	// master's certificate (`--tls-ca`). For a master behind a proxy with
	// a publicly trusted certificate, name the system's bundle
	// (/etc/ssl/certs/ca-certificates.crt on Debian).
	CAFile string
	// ServerName is the name the master's certificate must be valid for
	// (`--tls-server-name`); "" takes the host of the master's address.
	ServerName string
}

// Enabled reports whether the client speaks TLS.
func (t TLS) Enabled() bool { return t.CAFile != "" }

// URL is the base URL of the master at addr (HOST:PORT).
func (t TLS) URL(addr string) string {
	if t.Enabled() {
		return "https://" + addr
	}
	return "http://" + addr
}

// Config reads the CA file and returns the client's TLS configuration, or
// nil for cleartext. An unreadable file, or one without a certificate, is an
// error that names it.
func (t TLS) Config() (*tls.Config, error) {
	if !t.Enabled() {
		if t.ServerName != "" {
			return nil, fmt.Errorf("a TLS server name (%q) is given without a CA bundle: pass --tls-ca FILE too, or drop the server name", t.ServerName)
		}
		return nil, nil
	}
	b, err := userfile.Read(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read the CA bundle that verifies the master: %w; pass --tls-ca the PEM file of the CA that signed the master's certificate", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate (-----BEGIN CERTIFICATE-----); pass --tls-ca the PEM file of the CA that signed the master's certificate", t.CAFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}, nil
}

// HTTPClient returns the HTTP client for a master reached as t says: h2c
// (NewHTTPClient) or HTTP/2 over TLS (NewTLSHTTPClient). Its errors are
// Config's.
func (t TLS) HTTPClient() (*http.Client, error) {
	cfg, err := t.Config()
	if err != nil || cfg == nil {
		return NewHTTPClient(), err
	}
	return NewTLSHTTPClient(cfg, t.CAFile), nil
}

// NewTLSHTTPClient returns an HTTP client that speaks HTTP/2 over TLS (ALPN
// h2) to a master, verifying it with cfg; caFile names cfg's CAs in errors.
// A handshake that fails for a reason another try cannot fix (a master that
// answers in cleartext, a certificate of another CA or for another name, no
// HTTP/2) fails with a *TLSError, which Retryable rejects.
func NewTLSHTTPClient(cfg *tls.Config, caFile string) *http.Client {
	t := newTransport()
	t.Protocols.SetHTTP2(true)
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dialMaster(ctx, network, addr, 0, false, "", nil)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		c.NextProtos = []string{"h2"}
		conn := tls.Client(raw, c)
		_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, &NoAnswerError{Addr: addr, What: "the TLS handshake", Wait: handshakeTimeout}
			}
			return nil, classifyHandshake(ctx, addr, caFile, c.ServerName, err)
		}
		_ = raw.SetDeadline(time.Time{})
		if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
			conn.Close()
			return nil, noHTTP2(addr, fmt.Errorf("the server negotiated %q, not HTTP/2 (ALPN h2)", p))
		}
		return conn, nil
	}
	return &http.Client{Transport: t}
}

// TLSError is a TLS handshake with a master that failed for a reason another
// try cannot fix. Its message says what was wrong and what to do.
type TLSError struct {
	Addr string // the master's HOST:PORT
	Err  error  // what crypto/tls said
	Hint string // what to do
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("TLS with the master at %s: %v; %s", e.Addr, e.Err, e.Hint)
}

func (e *TLSError) Unwrap() error { return e.Err }

func noHTTP2(addr string, err error) *TLSError {
	return &TLSError{Addr: addr, Err: err,
		Hint: "the master, or a proxy in front of it, must speak HTTP/2 over TLS (ALPN h2): gRPC needs it; let the proxy pass HTTP/2 through"}
}

// classifyHandshake wraps the handshake errors that mean a misconfiguration
// in a *TLSError and passes the others (a connection reset, a timeout: a
// master restarting) through, to be retried.
func classifyHandshake(ctx context.Context, addr, caFile, serverName string, err error) error {
	var (
		rec       tls.RecordHeaderError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &rec) && probeCleartext(ctx, addr) == plainHTTP:
		return &NotMasterError{Addr: addr, Found: plainHTTP}
	case errors.As(err, &rec):
		return &TLSError{Addr: addr, Err: errors.New("it answered in cleartext, not TLS"),
			Hint: "that master serves without TLS: drop --tls-ca, or start `rover master` with --tls-cert and --tls-key"}
	case errors.As(err, &authority):
		return &TLSError{Addr: addr, Err: err,
			Hint: fmt.Sprintf("its certificate is not signed by a CA in %s: pass --tls-ca the CA bundle that signed the master's certificate", caFile)}
	case errors.As(err, &host):
		return &TLSError{Addr: addr, Err: err,
			Hint: fmt.Sprintf("its certificate is not valid for %q: reach the master by a name its certificate holds, or give that name with --tls-server-name", serverName)}
	case strings.Contains(err.Error(), "tls: no application protocol"): // the server's alert: it has no h2
		return noHTTP2(addr, err)
	case errors.As(err, &invalid):
		return &TLSError{Addr: addr, Err: err, Hint: "the master's certificate cannot be used (expired, not yet valid, or not for a server): give the master a valid one"}
	}
	return err
}
