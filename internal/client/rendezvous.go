package client

import (
	"github.com/roverml/rover/internal/nodecheck"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/node"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/runconfig"
)

// RendezvousConfig is a job's rendezvous policy and liveness settings: what
// an agent asks for when it joins, and what a master is preset with. Its
// layout is the master's, which converts it to its own type.
type RendezvousConfig struct {
	Rendezvous rendezvous.Config
	Nodes      node.Config
	Checkpoint CheckpointStorage
	// NodeCheck is the job's pre-flight node check (nil: none).
	NodeCheck *NodeCheck `json:"node_check,omitempty"`
	Hang      HangConfig
}

// HangConfig is a job's hang detection (docs/design/hang-and-stragglers.md):
// no worker progress for Timeout, after the job progressed, is a hang (0:
// off), and Policy is what the master does then (DLRover's
// --hang_detection: 0 log, 1 warn, 2 restart the workers).
type HangConfig struct {
	Timeout time.Duration `json:"timeout,omitempty"`
	Policy  int           `json:"policy,omitempty"`
}

// NodeCheck is a job's pre-flight node check: the state machine's
// configuration (MinNodes is the rendezvous's) plus what the agents run.
type NodeCheck struct {
	nodecheck.Config
	// CommPerf: the collective moves more data (--comm-perf-test).
	CommPerf bool `json:"comm_perf,omitempty"`
}

// NodeCheckFromPolicy is p's node check, nil when it is off.
func NodeCheckFromPolicy(p runconfig.Policy) *NodeCheck {
	if !p.NodeCheck.Enabled {
		return nil
	}
	return &NodeCheck{Config: nodecheck.Config{ExcludeStragglers: p.NodeCheck.ExcludeStragglers, MinNodes: p.MinNodes}, CommPerf: p.NodeCheck.CommPerf}
}

// CheckpointStorage is where a job's checkpoints go and how many committed
// steps it keeps: job configuration, set once. An empty URL is none.
//
// When no launcher names it, the job's script may declare it, once: the
// first checkpointer that names a location (through its agent) sets it,
// and Declared says so.
type CheckpointStorage struct {
	URL  string `json:"url,omitempty"`
	Keep int    `json:"keep,omitempty"`
	// KeepDefault: Keep is the launcher's default, no --checkpoint-keep
	// was given, so a checkpointer may still declare the job's keep. The
	// journals of earlier Rovers lack it: their keep is fixed.
	KeepDefault bool `json:"keep_default,omitempty"`
	// Declared: the job's script declared the location (a checkpointer's
	// dir), not a launcher's --checkpoint-dir. Not on the wire.
	Declared bool `json:"declared,omitempty"`
}

// DefaultCheckpointKeep is the committed steps a job keeps when nothing
// says otherwise (--checkpoint-keep's default).
const DefaultCheckpointKeep = 1

// CheckpointStorageProto is the wire form of s (nil for none).
func CheckpointStorageProto(s CheckpointStorage) *roverv1.CheckpointStorage {
	if s.URL == "" {
		return nil
	}
	return &roverv1.CheckpointStorage{Url: s.URL, Keep: int32(s.Keep), KeepDefault: s.KeepDefault}
}

// CheckpointStorageFromProto reads the wire form; it checks nothing.
func CheckpointStorageFromProto(p *roverv1.CheckpointStorage) CheckpointStorage {
	return CheckpointStorage{URL: p.GetUrl(), Keep: int(p.GetKeep()), KeepDefault: p.GetKeepDefault()}
}

// RendezvousFromPolicy is the rendezvous configuration a command line asks for.
func RendezvousFromPolicy(p runconfig.Policy) RendezvousConfig {
	return RendezvousConfig{
		Rendezvous: rendezvous.Config{
			MinNodes:    p.MinNodes,
			MaxNodes:    p.MaxNodes,
			NodeUnit:    p.NodeUnit,
			MaxRestarts: p.MaxRestarts,
			LastCall:    p.LastCallTimeout,
			JoinTimeout: p.JoinTimeout,
		},
		Nodes: node.Config{
			HeartbeatTimeout: p.HeartbeatTimeout,
			DisconnectGrace:  p.DisconnectGrace,
		},
		NodeCheck: NodeCheckFromPolicy(p),
		Hang:      HangConfig{Timeout: p.HangTimeout, Policy: p.HangDetection},
	}
}

// RendezvousProto is the wire form of c. Durations travel in whole
// milliseconds.
func RendezvousProto(c RendezvousConfig) *roverv1.RendezvousConfig {
	return &roverv1.RendezvousConfig{
		MinNodes:               int32(c.Rendezvous.MinNodes),
		MaxNodes:               int32(c.Rendezvous.MaxNodes),
		NodeUnit:               int32(c.Rendezvous.NodeUnit),
		MaxRestarts:            int32(c.Rendezvous.MaxRestarts),
		LastCallMillis:         c.Rendezvous.LastCall.Milliseconds(),
		JoinTimeoutMillis:      c.Rendezvous.JoinTimeout.Milliseconds(),
		HeartbeatTimeoutMillis: c.Nodes.HeartbeatTimeout.Milliseconds(),
		DisconnectGraceMillis:  c.Nodes.DisconnectGrace.Milliseconds(),
		Checkpoint:             CheckpointStorageProto(c.Checkpoint),
		HangTimeoutMillis:      c.Hang.Timeout.Milliseconds(),
		HangDetection:          int32(c.Hang.Policy),
		NodeCheck:              nodeCheckProto(c.NodeCheck),
	}
}

func nodeCheckProto(c *NodeCheck) *roverv1.NodeCheckConfig {
	if c == nil {
		return nil
	}
	return &roverv1.NodeCheckConfig{
		Enabled: true, ExcludeStragglers: c.ExcludeStragglers, CommPerf: c.CommPerf,
		StragglerRatio: c.StragglerRatio, GroupTimeoutMillis: c.GroupTimeout.Milliseconds(),
	}
}

// RendezvousFromProto reads the wire form. It checks nothing: the master
// validates what it receives before it converts it.
func RendezvousFromProto(p *roverv1.RendezvousConfig) RendezvousConfig {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	return RendezvousConfig{
		Rendezvous: rendezvous.Config{
			MinNodes:    int(p.GetMinNodes()),
			MaxNodes:    int(p.GetMaxNodes()),
			NodeUnit:    int(p.GetNodeUnit()),
			MaxRestarts: int(p.GetMaxRestarts()),
			LastCall:    ms(p.GetLastCallMillis()),
			JoinTimeout: ms(p.GetJoinTimeoutMillis()),
		},
		Nodes: node.Config{
			HeartbeatTimeout: ms(p.GetHeartbeatTimeoutMillis()),
			DisconnectGrace:  ms(p.GetDisconnectGraceMillis()),
		},
		Checkpoint: CheckpointStorageFromProto(p.GetCheckpoint()),
		Hang:       HangConfig{Timeout: ms(p.GetHangTimeoutMillis()), Policy: int(p.GetHangDetection())},
		NodeCheck:  nodeCheckFromProto(p.GetNodeCheck(), int(p.GetMinNodes())),
	}
}

func nodeCheckFromProto(p *roverv1.NodeCheckConfig, minNodes int) *NodeCheck {
	if !p.GetEnabled() {
		return nil
	}
	return &NodeCheck{
		Config: nodecheck.Config{
			ExcludeStragglers: p.GetExcludeStragglers(), StragglerRatio: p.GetStragglerRatio(),
			GroupTimeout: time.Duration(p.GetGroupTimeoutMillis()) * time.Millisecond, MinNodes: minNodes,
		},
		CommPerf: p.GetCommPerf(),
	}
}
