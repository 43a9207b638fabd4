// Package configwire converts a job's configuration (package jobconfig) to
// and from the protocol's RendezvousConfig and CheckpointStorage messages:
// the one place that knows both. Durations travel in whole milliseconds.
// It checks nothing: the master validates what it receives before it
// converts it.
package configwire

import (
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/rendezvous"
)

// ToProto is the wire form of c.
func ToProto(c jobconfig.Config) *roverv1.RendezvousConfig {
	return &roverv1.RendezvousConfig{
		MinNodes:               int32(c.Rendezvous.MinNodes),
		MaxNodes:               int32(c.Rendezvous.MaxNodes),
		NodeUnit:               int32(c.Rendezvous.NodeUnit),
		MaxRestarts:            int32(c.Rendezvous.MaxRestarts),
		LastCallMillis:         c.Rendezvous.LastCall.Milliseconds(),
		JoinTimeoutMillis:      c.Rendezvous.JoinTimeout.Milliseconds(),
		HeartbeatTimeoutMillis: c.Nodes.HeartbeatTimeout.Milliseconds(),
		DisconnectGraceMillis:  c.Nodes.DisconnectGrace.Milliseconds(),
		Checkpoint:             StorageToProto(c.Checkpoint),
		HangTimeoutMillis:      c.Hang.Timeout.Milliseconds(),
		HangDetection:          int32(c.Hang.Policy),
		NodeCheck:              nodeCheckToProto(c.NodeCheck),
	}
}

// FromProto reads the wire form.
func FromProto(p *roverv1.RendezvousConfig) jobconfig.Config {
	return jobconfig.Config{
		Rendezvous: rendezvous.Config{
			MinNodes:    int(p.GetMinNodes()),
			MaxNodes:    int(p.GetMaxNodes()),
			NodeUnit:    int(p.GetNodeUnit()),
			MaxRestarts: int(p.GetMaxRestarts()),
			LastCall:    millis(p.GetLastCallMillis()),
			JoinTimeout: millis(p.GetJoinTimeoutMillis()),
		},
		Nodes: liveness.Config{
			HeartbeatTimeout: millis(p.GetHeartbeatTimeoutMillis()),
			DisconnectGrace:  millis(p.GetDisconnectGraceMillis()),
		},
		Checkpoint: StorageFromProto(p.GetCheckpoint()),
		Hang:       jobconfig.Hang{Timeout: millis(p.GetHangTimeoutMillis()), Policy: int(p.GetHangDetection())},
		NodeCheck:  nodeCheckFromProto(p.GetNodeCheck(), int(p.GetMinNodes())),
	}
}

// StorageToProto is the wire form of s (nil for none).
func StorageToProto(s jobconfig.CheckpointStorage) *roverv1.CheckpointStorage {
	if s.URL == "" {
		return nil
	}
	return &roverv1.CheckpointStorage{Url: s.URL, Keep: int32(s.Keep), KeepDefault: s.KeepDefault}
}

// StorageFromProto reads the wire form of a checkpoint storage.
func StorageFromProto(p *roverv1.CheckpointStorage) jobconfig.CheckpointStorage {
	return jobconfig.CheckpointStorage{URL: p.GetUrl(), Keep: int(p.GetKeep()), KeepDefault: p.GetKeepDefault()}
}

func nodeCheckToProto(c *jobconfig.NodeCheck) *roverv1.NodeCheckConfig {
	if c == nil {
		return nil
	}
	return &roverv1.NodeCheckConfig{
		Enabled: true, ExcludeStragglers: c.ExcludeStragglers, CommPerf: c.CommPerf,
		StragglerRatio: c.StragglerRatio, GroupTimeoutMillis: c.GroupTimeout.Milliseconds(),
	}
}

func nodeCheckFromProto(p *roverv1.NodeCheckConfig, minNodes int) *jobconfig.NodeCheck {
	if !p.GetEnabled() {
		return nil
	}
	return &jobconfig.NodeCheck{
		Config: nodecheck.Config{
			ExcludeStragglers: p.GetExcludeStragglers(), StragglerRatio: p.GetStragglerRatio(),
			GroupTimeout: millis(p.GetGroupTimeoutMillis()), MinNodes: minNodes,
		},
		CommPerf: p.GetCommPerf(),
	}
}

func millis(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
