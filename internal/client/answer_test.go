package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/tlstest"
)

// startSilent listens on loopback, accepts every connection and never
// answers: a wrong port, a stuck proxy.
func startSilent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// startHTTP1 serves plain HTTP/1.1 only, as any web server does.
// startEagerHTTP1 starts a server that answers like a plain web server
// before it reads anything, and closes at once: the client's next write can
// fail before its reader saw the answer.
func startEagerHTTP1(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			c.Close()
		}
	}()
	return ln.Addr().String()
}

func startHTTP1(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestClientsDoNotHang: a port that accepts and never answers fails a call
// within the client's deadlines, in cleartext and over TLS, with a
// *NoAnswerError that the agent's retries (bounded by join_timeout) retry;
// a plain HTTP/1.x server is named as such, not "frame too large", and a
// call to it is not retried; a Rover-like h2c server reached with --tls-ca
// is still told apart from it.
func TestClientsDoNotHang(t *testing.T) {
	defer client.ShortenDeadlines(200 * time.Millisecond)()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	tlstest.WriteFile(t, caFile, tlstest.NewCA(t, "job CA").PEM)
	silent, plain, h2c, eager := startSilent(t), startHTTP1(t), startH2C(t, masterMux()), startEagerHTTP1(t)
	tests := []struct {
		name      string
		addr      string
		tls       client.TLS
		noAnswer  bool
		want      string
		retryable bool
	}{
		{"silent port, cleartext", silent, client.TLS{}, true, "accepted the connection but its first bytes did not come within", true},
		{"silent port, TLS", silent, client.TLS{CAFile: caFile}, true, "accepted the connection but the TLS handshake did not come within", true},
		{"plain HTTP/1.x, cleartext", plain, client.TLS{}, false, "answers plain HTTP/1.x, not a Rover master", false},
		{"plain HTTP/1.x, TLS", plain, client.TLS{CAFile: caFile}, false, "answers plain HTTP/1.x, not a Rover master", false},
		{"plain HTTP/1.x answering first, cleartext", eager, client.TLS{}, false, "answers plain HTTP/1.x, not a Rover master", false},
		{"h2c master, TLS", h2c, client.TLS{CAFile: caFile}, false, "that master serves without TLS", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc, err := tt.tls.HTTPClient()
			if err != nil {
				t.Fatal(err)
			}
			defer hc.CloseIdleConnections()
			// A deadline far past the client's: only turns a hang into a failure.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err = client.New(hc, tt.tls.URL(tt.addr), "s3cret-token-0123").GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
			if ctx.Err() != nil {
				t.Fatalf("GetJob hung until the test's deadline: %v", err)
			}
			var na *client.NoAnswerError
			if got := errors.As(err, &na); got != tt.noAnswer {
				t.Fatalf("GetJob = %v; a *NoAnswerError: %v, want %v", err, got, tt.noAnswer)
			}
			if tt.noAnswer && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%v does not wrap os.ErrDeadlineExceeded", err)
			}
			var nm *client.NotMasterError
			if want := strings.Contains(tt.want, "not a Rover master"); errors.As(err, &nm) != want {
				t.Errorf("GetJob = %v; a *NotMasterError: %v, want %v", err, !want, want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error lacks %q:\n%v", tt.want, err)
			}
			if client.Retryable(err) != tt.retryable {
				t.Errorf("Retryable(%v) = %v, want %v", err, !tt.retryable, tt.retryable)
			}
		})
	}
}
