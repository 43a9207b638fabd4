package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where a Server serves the metrics.
const Path = "/metrics"

// Server serves a registry's metrics at Path on a listener of its own, not
// on the master's RPC port: Prometheus and browsers speak HTTP/1.1 there,
// with no job token. Mux takes further read-only handlers (the dashboard)
// before Serve.
type Server struct {
	Mux *http.ServeMux
	ln  net.Listener
	srv *http.Server
}

// Listen listens on addr (HOST:PORT; port 0 picks one) and returns a Server
// of g's metrics, not serving yet.
func Listen(addr string, g prometheus.Gatherer) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr %s: %w (give a free HOST:PORT, or port 0 to pick one)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return &Server{Mux: mux, ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the address of the metrics, http://HOST:PORT/metrics.
func (s *Server) URL() string { return "http://" + s.Addr() + Path }

// Serve serves until ctx ends, then stops within a second; nil then.
func (s *Server) Serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve metrics on %s: %w", s.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(sctx)
	_ = s.srv.Close()
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics on %s: %w", s.Addr(), err)
	}
	return nil
}

// Close closes the listener of a server that will not Serve.
func (s *Server) Close() error { return s.ln.Close() }

// WriteAddrFile writes the server's address, and a newline, to path
// atomically: a reader sees all of it or no file.
func (s *Server) WriteAddrFile(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write the metrics address file: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(s.Addr() + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write the metrics address file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the metrics address file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write the metrics address file: %w", err)
	}
	return nil
}

// newRegistry is a private registry, with the Go runtime's and the
// process's standard metrics (go_*, process_*) when process is true: the
// registry the process serves, not one it merges into another.
func newRegistry(process bool) *prometheus.Registry {
	r := prometheus.NewRegistry()
	if process {
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return r
}
