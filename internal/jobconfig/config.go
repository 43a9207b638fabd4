// Package jobconfig is a job's configuration: the rendezvous policy, node
// liveness, checkpoint storage, pre-flight node check and hang detection
// that every node and the master agree on. A launcher derives it from the
// user's flags (runconfig.Policy.JobConfig), an agent sends it when it
// joins, a master is preset with it or takes the first agent's, and the
// master's journal keeps it (the JSON encoding below is part of the journal
// format: do not change a tag).
//
// It holds no wire types: package configwire converts it to and from the
// protocol's message, and it validates nothing that the master checks
// (internal/master does).
package jobconfig

import (
	"time"

	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/rendezvous"
)

// Config is a job's configuration.
type Config struct {
	Rendezvous rendezvous.Config `json:"rendezvous"`
	Nodes      liveness.Config   `json:"nodes"`
	// Checkpoint is where the job's checkpoints go (none when its URL is
	// empty): requests name steps, and the master and agents use this.
	Checkpoint CheckpointStorage `json:"checkpoint,omitzero"`
	// NodeCheck is the job's pre-flight node check (nil: none).
	NodeCheck *NodeCheck `json:"node_check,omitempty"`
	// Hang is the job's hang detection; absent from the journals of
	// earlier Rovers, where it is off.
	Hang Hang `json:"hang,omitzero"`
}

// Hang is a job's hang detection (docs/design/hang-and-stragglers.md): no
// worker progress for Timeout, after the job progressed, is a hang (0:
// off), and Policy is what the master does then (DLRover's
// --hang_detection: 0 log, 1 warn, 2 restart the workers).
type Hang struct {
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
