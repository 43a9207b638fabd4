package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/tlstest"
)

// TestCommandsAgainstNoMaster: `rover status` and `rover run` against a port
// that accepts and never answers, with --tls-ca, end with the client's
// deadline (status exits 1, run exits 3 after join_timeout) instead of
// hanging; against a plain web server they say that it is no Rover master.
func TestCommandsAgainstNoMaster(t *testing.T) {
	t.Setenv("ROVER_TOKEN", "")
	t.Setenv("ROVER_TLS_CA", "")
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "job.token")
	tlstest.WriteFile(t, caFile, tlstest.NewCA(t, "job CA").PEM)
	if err := os.WriteFile(tokenFile, []byte("right-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // never answered
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		for _, c := range held {
			c.Close()
		}
	})
	silent := ln.Addr().String()
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	plain := web.Listener.Addr().String()

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"status --tls-ca, silent port", []string{"rover", "status", "--master", silent, "--token-file", tokenFile, "--tls-ca", caFile}, 1,
			"accepted the connection but the TLS handshake did not come within 10s"},
		{"run --tls-ca, silent port", []string{"rover", "run", "--nnodes", "2", "--rdzv-endpoint", silent, "--token-file", tokenFile,
			"--tls-ca", caFile, "--node-id", "n", "--rdzv-conf", "join_timeout=1s", "--no-python", "true"}, 3,
			"the TLS handshake did not come within 10s"},
		{"status, plain HTTP", []string{"rover", "status", "--master", plain, "--token-file", tokenFile}, 1,
			"answers plain HTTP/1.x, not a Rover master"},
		{"status --tls-ca, plain HTTP", []string{"rover", "status", "--master", plain, "--token-file", tokenFile, "--tls-ca", caFile}, 1,
			"answers plain HTTP/1.x, not a Rover master"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.code {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, stderr.String())
			}
		})
	}
}

// TestStatusFlags: `rover status` takes its flags' defaults from the
// variables, and refuses a missing --master and a URL.
func TestStatusFlags(t *testing.T) {
	env := map[string]string{"ROVER_MASTER_ADDR": "m:1", "ROVER_TOKEN_FILE": "t", "ROVER_TLS_CA": "ca.pem", "ROVER_TLS_SERVER_NAME": "name"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		args    []string
		getenv  func(string) string
		want    *statusConfig
		wantErr string
	}{
		{"from the variables", nil, getenv,
			&statusConfig{Master: "m:1", TokenFile: "t", TLS: client.TLS{CAFile: "ca.pem", ServerName: "name"}}, ""},
		{"flags win", []string{"--master", "h:2", "--token-file", "u", "--tls-ca", "", "--tls-server-name", ""}, getenv,
			&statusConfig{Master: "h:2", TokenFile: "u"}, ""},
		{"no master", nil, func(string) string { return "" }, nil, "rover status needs --master HOST:PORT (or ROVER_MASTER_ADDR)"},
		{"a URL", []string{"--master", "https://h:2"}, getenv, nil,
			"--master=https://h:2: want HOST:PORT, not a URL; for a master that serves TLS, add --tls-ca FILE"},
		{"an unknown flag", []string{"--bogus"}, getenv, nil, "flag provided but not defined: -bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatusFlags(tt.args, io.Discard, tt.getenv)
			if tt.wantErr != "" {
				if _, ok := err.(usageError); !ok || err.Error() != tt.wantErr {
					t.Fatalf("parseStatusFlags(%q) = %+v, %v (%T); want the usage error %q", tt.args, got, err, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseStatusFlags(%q) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}
