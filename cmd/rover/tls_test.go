package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/tlstest"
)

// startTLSTestMaster runs a master that serves TLS with a certificate for
// 127.0.0.1, and returns its address, its token file and the CA bundle that
// verifies it.
func startTLSTestMaster(t *testing.T) (addr, tokenFile, caFile string) {
	t.Helper()
	dir := t.TempDir()
	files := tlstest.NewCA(t, "job CA").WriteServer(t, dir, "127.0.0.1")
	cert, err := master.LoadKeyPair(files.Cert, files.Key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tokenFile = filepath.Join(dir, "job.token")
	if err := os.WriteFile(tokenFile, []byte("right-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := master.New(ctx, master.Config{Listen: "127.0.0.1:0", Token: "right-token-0123456789",
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m.Addr(), tokenFile, files.CA
}

// TestTLSCommands runs `rover status` and `rover run` against a master that
// serves TLS and one that does not: with the right CA bundle they work; a
// client and a master that disagree on TLS, or a bundle of another CA, fail
// at once with a message that says what to do, as does a file that cannot
// be used.
func TestTLSCommands(t *testing.T) {
	t.Setenv("ROVER_TOKEN", "")
	t.Setenv("ROVER_TLS_CA", "")
	addr, tokenFile, caFile := startTLSTestMaster(t)
	plainAddr, plainToken := startTestMaster(t)
	dir := t.TempDir()
	otherCA := filepath.Join(dir, "other-ca.pem")
	tlstest.WriteFile(t, otherCA, tlstest.NewCA(t, "another CA").PEM)
	missing := filepath.Join(dir, "missing.pem")
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM, keyPEM := tlstest.NewCA(t, "job CA").Issue(t, "127.0.0.1")
	tlstest.WriteFile(t, cert, certPEM)
	tlstest.WriteFile(t, key, keyPEM)
	runArgs := func(addr, tokenFile string, extra ...string) []string {
		return append([]string{"rover", "run", "--nnodes", "1", "--rdzv-endpoint", addr, "--token-file", tokenFile,
			"--node-id", "n", "--rdzv-conf", "join_timeout=60"}, append(extra, "--no-python", "true")...)
	}

	tests := []struct {
		name string
		args []string
		code int
		want string // on stderr, or on stdout for code 0
	}{
		{"status over TLS", []string{"rover", "status", "--master", addr, "--token-file", tokenFile, "--tls-ca", caFile}, 0, "job default: running"},
		{"status without a CA, to a TLS master", []string{"rover", "status", "--master", addr, "--token-file", tokenFile}, 1,
			"this master serves TLS (https) and the client spoke cleartext: give the client the CA bundle that signed the master's certificate (rover run and rover status: --tls-ca FILE)"},
		{"status with another CA", []string{"rover", "status", "--master", addr, "--token-file", tokenFile, "--tls-ca", otherCA}, 1,
			"its certificate is not signed by a CA in " + otherCA},
		{"status with a CA, to a cleartext master", []string{"rover", "status", "--master", plainAddr, "--token-file", plainToken, "--tls-ca", caFile}, 1,
			"it answered in cleartext, not TLS; that master serves without TLS: drop --tls-ca, or start `rover master` with --tls-cert and --tls-key"},
		{"status with a missing CA file", []string{"rover", "status", "--master", addr, "--token-file", tokenFile, "--tls-ca", missing}, 2, missing},
		{"status with a URL", []string{"rover", "status", "--master", "https://" + addr, "--token-file", tokenFile}, 2, "not a URL"},
		{"run without a CA, to a TLS master", runArgs(addr, tokenFile), 3, "serves TLS (https) and the client spoke cleartext"},
		{"run with another CA", runArgs(addr, tokenFile, "--tls-ca", otherCA), 3, "not signed by a CA in " + otherCA},
		{"run with a CA, to a cleartext master", runArgs(plainAddr, plainToken, "--tls-ca", caFile), 3, "it answered in cleartext, not TLS"},
		{"run with a missing CA file", runArgs(addr, tokenFile, "--tls-ca", missing), 2, missing},
		{"master with a missing certificate", []string{"rover", "master", "--listen", "127.0.0.1:0", "--token-file", tokenFile,
			"--tls-cert", missing, "--tls-key", key}, 2, missing},
		{"master with the key of another certificate", []string{"rover", "master", "--listen", "127.0.0.1:0", "--token-file", tokenFile,
			"--tls-cert", cert, "--tls-key", filepath.Join(dir, "other-key.pem")}, 2, "other-key.pem"},
		// Last: the job ends when this node's workers succeed.
		{"run over TLS", runArgs(addr, tokenFile, "--tls-ca", caFile), 0, ""},
	}
	_, otherKey := tlstest.NewCA(t, "job CA").Issue(t, "127.0.0.1")
	tlstest.WriteFile(t, filepath.Join(dir, "other-key.pem"), otherKey)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			out := stderr.String()
			if tt.code == 0 {
				out = stdout.String()
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}
