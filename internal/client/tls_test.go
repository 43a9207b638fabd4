package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/tlstest"
)

// startTLS serves h over HTTP/2 and TLS on loopback with a certificate for
// 127.0.0.1 signed by ca (made with certPEM and keyPEM when given), and
// counts the requests that arrived over HTTP/2.
func startTLS(t *testing.T, h http.Handler, certPEM, keyPEM []byte) (addr string, h2 *atomic.Int64) {
	t.Helper()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	h2 = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), h2
}

// startTLSHTTP1 serves h over HTTP/1.1 and TLS (ALPN http/1.1 only), as a
// proxy without HTTP/2 would.
func startTLSHTTP1(t *testing.T, h http.Handler, ca *tlstest.CA) string {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, "127.0.0.1")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func masterMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(roverv1connect.NewMasterServiceHandler(headerMaster{}))
	return mux
}

// TestTLSReachesTheMaster: with a CA bundle the client speaks HTTP/2 over
// TLS, verifies the master, and carries the token, on unary calls and on the
// session stream.
func TestTLSReachesTheMaster(t *testing.T) {
	ca := tlstest.NewCA(t, "job CA")
	cert, key := ca.Issue(t, "127.0.0.1")
	addr, h2 := startTLS(t, masterMux(), cert, key)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)

	cfg := client.TLS{CAFile: caFile}
	hc, err := cfg.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := client.New(hc, cfg.URL(addr), "s3cret-token-0123")
	resp, err := m.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		t.Fatalf("GetJob over TLS: %v", err)
	}
	if got := resp.Msg.GetRunId(); got != "Bearer s3cret-token-0123" {
		t.Errorf("the call carried %q", got)
	}
	s := m.Session(ctx)
	if err := s.Send(&roverv1.SessionRequest{}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Session send: %v", err)
	}
	if _, err := s.Receive(); err != nil {
		t.Fatalf("Session receive over TLS: %v", err)
	}
	_ = s.CloseRequest()
	_ = s.CloseResponse()
	if h2.Load() != 2 {
		t.Errorf("%d of 2 requests came over HTTP/2", h2.Load())
	}
}

// TestTLSRefusals: a misconfiguration fails the first call at once with a
// message that says what to do, and Retryable rejects it.
func TestTLSRefusals(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "job CA")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	other := tlstest.NewCA(t, "another CA")
	otherFile := filepath.Join(dir, "other-ca.pem")
	tlstest.WriteFile(t, otherFile, other.PEM)

	cert, key := ca.Issue(t, "127.0.0.1")
	good, _ := startTLS(t, masterMux(), cert, key)
	cert, key = ca.Issue(t, "master.example")
	byName, _ := startTLS(t, masterMux(), cert, key)
	cert, key = ca.IssueValid(t, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour), "127.0.0.1")
	expired, _ := startTLS(t, masterMux(), cert, key)
	cleartext := startH2C(t, masterMux())
	http1Only := startTLSHTTP1(t, masterMux(), ca)

	tests := []struct {
		name string
		addr string
		tls  client.TLS
		want []string
	}{
		{"a master that speaks cleartext", cleartext, client.TLS{CAFile: caFile},
			[]string{"answered in cleartext", "drop --tls-ca", "--tls-cert"}},
		{"a certificate of another CA", good, client.TLS{CAFile: otherFile},
			[]string{"not signed by a CA in " + otherFile, "--tls-ca"}},
		{"a certificate for another name", byName, client.TLS{CAFile: caFile},
			[]string{`not valid for "127.0.0.1"`, "--tls-server-name"}},
		{"a server name the certificate lacks", good, client.TLS{CAFile: caFile, ServerName: "elsewhere.example"},
			[]string{`not valid for "elsewhere.example"`}},
		{"a server that offers HTTP/1.1 only", http1Only, client.TLS{CAFile: caFile},
			[]string{"HTTP/2", "proxy"}},
		{"an expired certificate", expired, client.TLS{CAFile: caFile},
			[]string{"expired", "give the master a valid one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc, err := tt.tls.HTTPClient()
			if err != nil {
				t.Fatal(err)
			}
			defer hc.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = client.New(hc, tt.tls.URL(tt.addr), "s3cret-token-0123").GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
			var te *client.TLSError
			if !errors.As(err, &te) {
				t.Fatalf("GetJob = %v, want a *client.TLSError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if client.Retryable(err) {
				t.Errorf("Retryable(%v) = true", err)
			}
		})
	}
	// The right name, given, passes.
	hc, err := client.TLS{CAFile: caFile, ServerName: "master.example"}.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	if _, err := client.New(hc, "https://"+byName, "t").GetJob(context.Background(), connect.NewRequest(&roverv1.GetJobRequest{})); err != nil {
		t.Errorf("GetJob with --tls-server-name master.example: %v", err)
	}
}

// TestTLSConfigErrors: a CA bundle that cannot be used is refused before
// anything is dialled, naming the file.
func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not-pem.txt")
	tlstest.WriteFile(t, notPEM, []byte("hello\n"))
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		tls  client.TLS
		want string
	}{
		{"a missing file", client.TLS{CAFile: missing}, missing},
		{"a file without certificates", client.TLS{CAFile: notPEM}, "CA bundle " + notPEM + " holds no PEM certificate"},
		{"a server name without a CA", client.TLS{ServerName: "m"}, "pass --tls-ca FILE too"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.tls.Config(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Config() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if cfg, err := (client.TLS{}).Config(); cfg != nil || err != nil {
		t.Errorf("the zero TLS: %v, %v; want cleartext", cfg, err)
	}
}
