package master

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/tlstest"
)

// startTLSMaster runs a master that serves TLS with a certificate for
// 127.0.0.1, and returns it with the CA bundle that verifies it.
func startTLSMaster(t *testing.T) (m *Master, caFile string) {
	t.Helper()
	dir := t.TempDir()
	files := tlstest.NewCA(t, "job CA").WriteServer(t, dir, "127.0.0.1")
	cert, err := LoadKeyPair(files.Cert, files.Key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m, _ = startMaster(t, Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	return m, files.CA
}

// TestTLSMaster: over TLS an agent joins on its session, gets its view,
// heartbeats, and uses the key-value store; a Connect JSON client gets
// through over HTTPS too.
func TestTLSMaster(t *testing.T) {
	m, caFile := startTLSMaster(t)
	cfg := client.TLS{CAFile: caFile}
	hc, err := cfg.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	c := client.New(hc, cfg.URL(m.Addr()), testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := openSessionRank(ctx, t, c, "n0", -1, rdzvConfig(1, 1))
	defer s.CloseRequest()
	// The join travels on the stream: wait for its answer before asking
	// for the job.
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment() != nil })
	if err := s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Heartbeat{Heartbeat: &roverv1.Heartbeat{}}}); err != nil {
		t.Fatalf("heartbeat over TLS: %v", err)
	}
	if _, err := c.SetKey(ctx, connect.NewRequest(&roverv1.SetKeyRequest{Key: "k", Value: []byte("v")})); err != nil {
		t.Fatalf("SetKey over TLS: %v", err)
	}
	got, err := c.GetKey(ctx, connect.NewRequest(&roverv1.GetKeyRequest{Key: "k"}))
	if err != nil || string(got.Msg.GetValue()) != "v" {
		t.Fatalf("GetKey over TLS: %v, %q", err, got.Msg.GetValue())
	}
	job, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil || len(job.Msg.GetNodes()) != 1 {
		t.Fatalf("GetJob over TLS: %v, %v", err, job)
	}

	// Connect's JSON protocol over HTTP/1.1 and TLS, as curl would speak it.
	tc, err := cfg.Config()
	if err != nil {
		t.Fatal(err)
	}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer h1.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "https://"+m.Addr()+"/rover.v1.MasterService/GetJob", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(client.AuthHeader, client.AuthScheme+testToken)
	resp, err := h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"nodeId":"n0"`) {
		t.Errorf("GetJob in JSON over HTTPS: %d %s", resp.StatusCode, b)
	}
}

// TestCleartextClientToTLSMaster: a client that speaks cleartext to a master
// that serves TLS is told so at once (gRPC unary, the session stream, and
// Connect's JSON over HTTP/1.1), with FailedPrecondition, which no retry
// loop retries.
func TestCleartextClientToTLSMaster(t *testing.T) {
	m, _ := startTLSMaster(t)
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	c := client.New(hc, m.Addr(), testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(what string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--tls-ca") {
			t.Errorf("%s: %v; want FailedPrecondition naming --tls-ca", what, err)
		}
		if client.Retryable(err) {
			t.Errorf("%s: Retryable(%v) = true", what, err)
		}
	}
	_, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	check("GetJob", err)
	s := c.Session(ctx)
	if err := s.Send(&roverv1.SessionRequest{}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Session send: %v", err)
	}
	_, err = s.Receive()
	check("Session", err)
	_ = s.CloseResponse()

	resp, err := http.Post("http://"+m.Addr()+"/rover.v1.MasterService/GetJob", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "serves TLS") {
		t.Errorf("JSON over cleartext HTTP/1.1: %d %s", resp.StatusCode, b)
	}
}

// TestLoadKeyPair: a certificate or key that cannot serve is refused with a
// message naming the file at fault.
func TestLoadKeyPair(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "job CA")
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		tlstest.WriteFile(t, p, data)
		return p
	}
	certPEM, keyPEM := ca.Issue(t, "127.0.0.1")
	cert, key := write("cert.pem", certPEM), write("key.pem", keyPEM)
	_, otherKeyPEM := ca.Issue(t, "127.0.0.1")
	otherKey := write("other-key.pem", otherKeyPEM)
	now := time.Now()
	oldPEM, oldKeyPEM := ca.IssueValid(t, now.Add(-48*time.Hour), now.Add(-24*time.Hour), "127.0.0.1")
	old, oldKey := write("old.pem", oldPEM), write("old-key.pem", oldKeyPEM)
	futurePEM, futureKeyPEM := ca.IssueValid(t, now.Add(24*time.Hour), now.Add(48*time.Hour), "127.0.0.1")
	future, futureKey := write("future.pem", futurePEM), write("future-key.pem", futureKeyPEM)
	text := write("text.pem", []byte("not pem\n"))
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name      string
		cert, key string
		want      []string // substrings of the error; none for success
	}{
		{"a good pair", cert, key, nil},
		{"a missing certificate", missing, key, []string{missing, "--tls-cert"}},
		{"a missing key", cert, missing, []string{missing, "--tls-key"}},
		{"a certificate file without a certificate", text, key, []string{"--tls-cert " + text, "no PEM certificate"}},
		{"a key file without a key", cert, text, []string{"--tls-key " + text, "no PEM private key"}},
		{"swapped files", key, cert, []string{"swap them"}},
		{"the key of another certificate", cert, otherKey, []string{otherKey, "is not the key of the certificate in " + cert}},
		{"an expired certificate", old, oldKey, []string{old, "expired", "renew it"}},
		{"a certificate not valid yet", future, futureKey, []string{future, "not valid before"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadKeyPair(tt.cert, tt.key, now)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("LoadKeyPair: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("LoadKeyPair succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

// TestTLSMasterStopsWithSilentConnections: connections that never send
// their first byte do not hold up a master that stops (the wait for a first
// byte is an hour here, so that only stopping can end it).
func TestTLSMasterStopsWithSilentConnections(t *testing.T) {
	files := tlstest.NewCA(t, "job CA").WriteServer(t, t.TempDir(), "127.0.0.1")
	cert, err := LoadKeyPair(files.Cert, files.Key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := New(ctx, Config{Listen: "127.0.0.1:0", Token: testToken, TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	if err != nil {
		t.Fatal(err)
	}
	m.split.firstByteTimeout = time.Hour
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for range 2 {
		c, err := net.Dial("tcp", m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	deadline := time.Now().Add(time.Minute) // turns a hang into a failure
	for waiting := 0; waiting < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 silent connections reached the splitter", waiting)
		}
		runtime.Gosched()
		m.split.mu.Lock()
		waiting = len(m.split.waiting)
		m.split.mu.Unlock()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute): // turns a hang into a failure
		t.Fatal("the master did not stop while two connections stayed silent")
	}
}
