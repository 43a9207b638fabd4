package python

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAgentClientKeepsItsConnection runs rover._agent against a real Go
// HTTP server on a unix socket, as the agent's local API is served: replies
// with a Content-Length, chunked ones, Connect errors and a server that
// closes the connection are all read right, and the calls of a process
// share one connection until the server closes it.
func TestAgentClientKeepsItsConnection(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/rover.v1.AgentService/Echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Connect-Protocol-Version") != "1" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad headers", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"got": %s}`, body)
	})
	mux.HandleFunc("/rover.v1.AgentService/Big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// Larger than net/http's buffer, flushed early: sent chunked.
		fmt.Fprintf(w, `{"pad": "%s",`, strings.Repeat("x", 9000))
		w.(http.Flusher).Flush()
		fmt.Fprint(w, `"n": 7}`)
	})
	mux.HandleFunc("/rover.v1.AgentService/Fail", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"code": "invalid_argument", "message": "no such rank"}`)
	})
	mux.HandleFunc("/rover.v1.AgentService/Close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		fmt.Fprint(w, `{"closed": true}`)
	})
	srv := &http.Server{Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	script := `
import json
from rover import _agent
out = []
for i in range(20):
    out.append(_agent.call("Echo", {"i": i})["got"]["i"])
big = _agent.call("Big", {})
out.append([len(big["pad"]), big["n"]])
try:
    _agent.call("Fail", {})
except _agent.AgentError as e:
    out.append([e.code, e.message])
out.append(_agent.call("Close", {}))
out.append(_agent.call("Echo", {"i": "after close"})["got"]["i"])
print(json.dumps(out))
`
	cmd := exec.Command("python3", "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "ROVER_AGENT_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	want := `[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, [9000, 7], ` +
		`["invalid_argument", "no such rank"], {"closed": true}, "after close"]`
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("replies:\n got %s\nwant %s", got, want)
	}
	// One connection for every call up to the one the server closed, and
	// one more after it.
	if n := conns.Load(); n != 2 {
		t.Errorf("the client opened %d connections, want 2", n)
	}
}
