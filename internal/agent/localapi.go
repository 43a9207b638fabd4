package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/agent/ckptsaver"
	"github.com/roverml/rover/internal/agent/privdir"
	"github.com/roverml/rover/python"
)

// localAPI serves the agent's API to its workers on a unix socket in a
// directory only the job's user can enter, next to the extracted Python
// package.
type localAPI struct {
	dir    string
	socket string
	pypath string
	srv    *http.Server
	done   chan struct{}
	// current is the placement of the running worker group (nil between groups).
	current atomic.Pointer[placement]
}

// startLocalAPI creates the agent's private runtime directory, extracts the
// Python package and serves the local API.
func (a *agent) startLocalAPI() (*localAPI, error) {
	dir, err := privdir.Create(os.TempDir(), "rover-agent-")
	if err != nil {
		return nil, fmt.Errorf("create the agent's runtime directory: %w", err)
	}
	l := &localAPI{dir: dir, socket: filepath.Join(dir, "agent.sock"), done: make(chan struct{})}
	if l.pypath, err = python.Extract(filepath.Join(dir, "python")); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("unix", l.socket)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("listen on the agent socket: %w", err)
	}
	if err := os.Chmod(l.socket, 0o600); err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("restrict the agent socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(roverv1connect.NewAgentServiceHandler(&agentService{a: a, l: l, LocalAPI: a.ckpt.LocalAPI()}, connect.WithReadMaxBytes(64<<20)))
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(l.done)
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("local API stopped", "err", err)
		}
	}()
	return l, nil
}

// env is what every worker needs to reach the agent and import rover.
func (l *localAPI) env(base []string) []string {
	pythonPath := l.pypath
	for _, kv := range base {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok && v != "" {
			pythonPath += string(os.PathListSeparator) + v
		}
	}
	return []string{"ROVER_AGENT_SOCKET=" + l.socket, "PYTHONPATH=" + pythonPath}
}

func (l *localAPI) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.srv.Shutdown(ctx)
	<-l.done
	os.RemoveAll(l.dir)
}

// agentService implements the local API.
type agentService struct {
	a                   *agent
	l                   *localAPI
	*ckptsaver.LocalAPI // the checkpoint calls
}

var _ roverv1connect.AgentServiceHandler = (*agentService)(nil)

func (s *agentService) Info(ctx context.Context, req *connect.Request[roverv1.InfoRequest]) (*connect.Response[roverv1.InfoResponse], error) {
	p := s.l.current.Load()
	if p == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no worker group is running on this node"))
	}
	return connect.NewResponse(&roverv1.InfoResponse{
		RunId:          p.RunID,
		NodeId:         p.NodeID,
		NodeRank:       int32(p.NodeRank),
		Round:          int64(p.Round),
		GroupRank:      int32(p.GroupRank),
		GroupWorldSize: int32(p.GroupWorldSize),
		LocalWorldSize: int32(p.LocalWorldSize),
		WorldSize:      int32(p.WorldSize),
		RestartCount:   int32(p.RestartCount),
		AgentVersion:   Version,
	}), nil
}

// Version is the agent's version, reported to workers (set by cmd/rover).
var Version = "dev"
