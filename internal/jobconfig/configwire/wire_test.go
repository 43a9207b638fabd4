package configwire_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/runconfig"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestRendezvousConversions(t *testing.T) {
	p := runconfig.Policy{MinNodes: 2, MaxNodes: 8, NodeUnit: 2, MaxRestarts: 3, JoinTimeout: 10 * time.Minute,
		LastCallTimeout: 1500 * time.Millisecond, HeartbeatTimeout: time.Minute, DisconnectGrace: 5 * time.Second}
	want := jobconfig.Config{
		Rendezvous: rendezvous.Config{MinNodes: 2, MaxNodes: 8, NodeUnit: 2, MaxRestarts: 3,
			LastCall: 1500 * time.Millisecond, JoinTimeout: 10 * time.Minute},
		Nodes: liveness.Config{HeartbeatTimeout: time.Minute, DisconnectGrace: 5 * time.Second},
	}
	got := p.JobConfig()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JobConfig (-want +got):\n%s", diff)
	}
	wire := configwire.ToProto(got)
	wantWire := &roverv1.RendezvousConfig{MinNodes: 2, MaxNodes: 8, NodeUnit: 2, MaxRestarts: 3, LastCallMillis: 1500,
		JoinTimeoutMillis: 600_000, HeartbeatTimeoutMillis: 60_000, DisconnectGraceMillis: 5000}
	if diff := cmp.Diff(wantWire, wire, protocmp.Transform()); diff != "" {
		t.Errorf("ToProto (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, configwire.FromProto(wire)); diff != "" {
		t.Errorf("FromProto(ToProto(c)) != c (-want +got):\n%s", diff)
	}
}
