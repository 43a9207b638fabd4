package standalone_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/agent/standalone"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/rendezvous"
)

// TestStart: the embedded master serves the job's preset settings to a
// client holding the token it returns, and is gone after Stop.
func TestStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdzv := jobconfig.Config{
		Rendezvous: rendezvous.Config{MinNodes: 1, MaxNodes: 1, NodeUnit: 1, MaxRestarts: 2, LastCall: time.Second, JoinTimeout: time.Minute},
		Nodes:      liveness.Config{HeartbeatTimeout: time.Minute, DisconnectGrace: 5 * time.Second},
	}
	m, err := standalone.Start(ctx, agent.EmbeddedMaster{Job: "solo", Rendezvous: rdzv,
		StateDir: filepath.Join(t.TempDir(), "master"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	c := client.New(hc, m.Addr, m.Token)
	resp, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		m.Stop()
		t.Fatalf("GetJob: %v", err)
	}
	if diff := cmp.Diff(rdzv, configwire.FromProto(resp.Msg.GetRendezvous())); diff != "" {
		t.Errorf("the master's rendezvous settings (-want +got):\n%s", diff)
	}
	if got := resp.Msg.GetRunId(); got != "solo" {
		t.Errorf("run id %q, want solo", got)
	}
	m.Stop()
	hc.CloseIdleConnections()
	if _, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{})); !client.Retryable(err) {
		t.Errorf("GetJob after Stop = %v, want an unreachable master", err)
	}
}
