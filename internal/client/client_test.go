package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/testsrc"
)

// headerMaster answers GetJob and Session with the Authorization header it
// received, as the job's run id.
type headerMaster struct {
	roverv1connect.UnimplementedMasterServiceHandler
}

func (headerMaster) GetJob(_ context.Context, req *connect.Request[roverv1.GetJobRequest]) (*connect.Response[roverv1.GetJobResponse], error) {
	return connect.NewResponse(&roverv1.GetJobResponse{RunId: req.Header().Get(client.AuthHeader)}), nil
}

func (headerMaster) Session(_ context.Context, s *connect.BidiStream[roverv1.SessionRequest, roverv1.SessionResponse]) error {
	// Take the client's message before answering and returning: a stream
	// that ends first can fail the client's send with EOF.
	if _, err := s.Receive(); err != nil {
		return err
	}
	view := &roverv1.NodeView{RunId: s.RequestHeader().Get(client.AuthHeader)}
	return s.Send(&roverv1.SessionResponse{View: view})
}

// startH2C serves h on loopback over h2c, as a master does.
func startH2C(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func TestNewSendsTheToken(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(roverv1connect.NewMasterServiceHandler(headerMaster{}))
	addr := startH2C(t, mux)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, target := range []string{addr, "http://" + addr} {
		hc := client.NewHTTPClient() // each target on its own connection
		defer hc.CloseIdleConnections()
		m := client.New(hc, target, "s3cret")
		resp, err := m.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
		if err != nil {
			t.Fatalf("GetJob at %s: %v", target, err)
		}
		if got, want := resp.Msg.GetRunId(), "Bearer s3cret"; got != want {
			t.Errorf("unary call at %s carried %q, want %q", target, got, want)
		}
		s := m.Session(ctx)
		// The server answers and ends the stream as soon as it has the
		// message, which can race the end of the send: connect then reports
		// EOF from Send, and the outcome is Receive's.
		if err := s.Send(&roverv1.SessionRequest{}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("Session send: %v", err)
		}
		msg, err := s.Receive()
		if err != nil {
			t.Fatalf("Session receive: %v", err)
		}
		if got, want := msg.GetView().GetRunId(), "Bearer s3cret"; got != want {
			t.Errorf("stream at %s carried %q, want %q", target, got, want)
		}
		_ = s.CloseRequest()
		_ = s.CloseResponse()
	}
}

func TestRetryable(t *testing.T) {
	code := func(c connect.Code) error { return connect.NewError(c, errors.New("x")) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"unavailable", code(connect.CodeUnavailable), true},
		{"unknown", code(connect.CodeUnknown), true},
		{"the master's deadline", code(connect.CodeDeadlineExceeded), true},
		{"aborted", code(connect.CodeAborted), true},
		{"wrapped unavailable", fmt.Errorf("join: %w", code(connect.CodeUnavailable)), true},
		{"a plain error (a broken stream)", errors.New("unexpected EOF"), true},
		{"invalid argument", code(connect.CodeInvalidArgument), false},
		{"an answer cut short (the client's protocol error)",
			connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("protocol error: incomplete envelope: %w", io.ErrUnexpectedEOF)), true},
		{"a connection reset mid-answer", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("read: %w", syscall.ECONNRESET)), true},
		{"the master's own invalid argument, whatever its cause",
			connect.NewWireError(connect.CodeInvalidArgument, fmt.Errorf("bad: %w", io.ErrUnexpectedEOF)), false},
		{"unauthenticated", code(connect.CodeUnauthenticated), false},
		{"failed precondition", code(connect.CodeFailedPrecondition), false},
		{"not found", code(connect.CodeNotFound), false},
		{"the caller cancelled", context.Canceled, false},
		{"the caller cancelled, through connect", connect.NewError(connect.CodeCanceled, context.Canceled), false},
		{"the caller's deadline, through connect", connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded), false},
		{"the caller's deadline, wrapped", fmt.Errorf("call: %w", context.DeadlineExceeded), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := client.Retryable(tt.err); got != tt.want {
				t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestRetryableRealCalls classifies the errors of real calls: a master that
// is not there is worth another try; a call its caller cancelled is not.
func TestRetryableRealCalls(t *testing.T) {
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	m := client.New(hc, "127.0.0.1:1", "t") // nothing listens on port 1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := m.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if !client.Retryable(err) {
		t.Errorf("a call to a closed port failed with %v (code %v), which Retryable rejects", err, connect.CodeOf(err))
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	_, err = m.GetJob(cancelled, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err == nil || client.Retryable(err) {
		t.Errorf("a cancelled call failed with %v, which Retryable accepts", err)
	}
}

func TestToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "job.token")
	if err := os.WriteFile(file, []byte("from-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.token")
	tests := []struct {
		name    string
		file    string
		env     string
		want    string
		wantErr string // a substring of the error, "" for none
	}{
		{"file wins over the variable", file, "from-env-0123456789", "from-file-0123456789", ""},
		{"file alone", file, "", "from-file-0123456789", ""},
		{"variable alone", "", " from-env-0123456789\n", "from-env-0123456789", ""},
		{"neither", "", "", "", "no job token: pass --token-file PATH"},
		{"a missing file is an error, not a fall back to the variable", missing, "from-env-0123456789", "", "missing.token"},
		{"an empty file is an error", empty, "from-env-0123456789", "", "token file " + empty + " is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.Token(tt.file, func(k string) string {
				if k == client.TokenEnv {
					return tt.env
				}
				return ""
			})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Token = %q, %v; want error containing %q", got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Token = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := client.Token("", func(string) string { return "" }); !errors.Is(err, client.ErrNoToken) {
		t.Errorf("Token without a source = %v, want ErrNoToken", err)
	}
}

// TestDependencies keeps the client apart from the master's server side:
// the agent reaches masters only through this package, so it must not pull
// package master in.
func TestDependencies(t *testing.T) {
	for _, pkg := range testsrc.Deps(t, false) {
		if pkg == "github.com/roverml/rover/internal/master" {
			t.Errorf("package client depends on %s", pkg)
		}
	}
}

// TestShortTokensRefused: a token that could be guessed is refused, from the
// variable and from a file, with the way out in the message.
func TestShortTokensRefused(t *testing.T) {
	env := func(v string) func(string) string { return func(string) string { return v } }
	if _, err := client.Token("", env("x")); err == nil || !strings.Contains(err.Error(), "fewer than 16") {
		t.Errorf("a one-character ROVER_TOKEN: %v, want it refused", err)
	}
	short := filepath.Join(t.TempDir(), "short.token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Token(short, env("")); err == nil || !strings.Contains(err.Error(), short) {
		t.Errorf("a 3-character token file: %v, want it refused naming the file", err)
	}
	if tok, err := client.Token("", env("0123456789abcdef")); err != nil || tok != "0123456789abcdef" {
		t.Errorf("a 16-character token: %q, %v", tok, err)
	}
}
