package rendezvous

import (
	"errors"
	"fmt"
	"time"
)

// Config is the rendezvous policy of one job.
type Config struct {
	// MinNodes and MaxNodes bound the world, in nodes:
	// 1 <= MinNodes <= MaxNodes <= MaxNodesLimit.
	MinNodes, MaxNodes int
	// NodeUnit: the world is truncated to a multiple of this many nodes.
	// 0 means 1. Some multiple of NodeUnit must lie in [MinNodes, MaxNodes].
	NodeUnit int
	// MaxRestarts is how many failure restarts the job may use (>= 0).
	// Membership changes (nodes lost or added) do not count.
	MaxRestarts int
	// LastCall: an open round with at least MinNodes closes once no node has
	// joined for this long (>= 0).
	LastCall time.Duration
	// JoinTimeout: the job fails when a round stays open this long without
	// enough nodes for a world (>= 0; 0 waits forever).
	JoinTimeout time.Duration
	// BlameWindow is how long after a worker failure a member of the failed
	// world may still be lost and take the blame (>= 0; 0: never). Workers
	// on the surviving nodes of a lost node die of their broken collectives
	// before the master notices the loss (its agent's disconnect grace, or
	// heartbeat timeout), so their failure reports usually arrive first:
	// such a failure is the loss's consequence, and spends no restart. A
	// failure is therefore settled only when the window has passed: with
	// restarts left, its restart starts at once and is given back if a loss
	// follows; with none left, the job fails only once the window passed
	// without a loss. See [Machine.WorkerFailed].
	BlameWindow time.Duration
}

// Validate reports every field that is out of range at once, joined into one
// error whose parts wrap [ErrInvalidConfig] and name the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	if c.MinNodes < 1 {
		bad("MinNodes is %d; it must be at least 1", c.MinNodes)
	}
	if c.MaxNodes < c.MinNodes || c.MaxNodes < 1 || c.MaxNodes > MaxNodesLimit {
		bad("MaxNodes is %d; it must be at least 1 and at least MinNodes (%d), and at most %d", c.MaxNodes, c.MinNodes, MaxNodesLimit)
	}
	if c.NodeUnit < 0 || c.NodeUnit > MaxNodesLimit {
		bad("NodeUnit is %d; use 0 or 1 for no rounding, or the number of nodes the world must be a multiple of", c.NodeUnit)
	}
	if c.MinNodes >= 1 && c.MaxNodes >= c.MinNodes && c.NodeUnit > 1 && c.MaxNodes/c.NodeUnit*c.NodeUnit < c.MinNodes {
		bad("NodeUnit is %d but no multiple of it lies between MinNodes (%d) and MaxNodes (%d); change one of the three", c.NodeUnit, c.MinNodes, c.MaxNodes)
	}
	if c.MaxRestarts < 0 {
		bad("MaxRestarts is %d; use 0 for no restarts or a positive budget", c.MaxRestarts)
	}
	if c.LastCall < 0 {
		bad("LastCall is %v; use 0 or a positive duration", c.LastCall)
	}
	if c.JoinTimeout < 0 {
		bad("JoinTimeout is %v; use 0 to wait forever or a positive duration", c.JoinTimeout)
	}
	if c.BlameWindow < 0 {
		bad("BlameWindow is %v; use 0 for none or a positive duration", c.BlameWindow)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with NodeUnit 0 replaced by 1.
func (c Config) withDefaults() Config {
	if c.NodeUnit == 0 {
		c.NodeUnit = 1
	}
	return c
}

// take is how many of j joined nodes a world would hold: min(j, MaxNodes)
// truncated to a multiple of NodeUnit.
func (c Config) take(j int) int {
	return min(j, c.MaxNodes) / c.NodeUnit * c.NodeUnit
}

// JobState is the outcome of the job so far.
type JobState int

// Job states.
const (
	Running JobState = iota
	Succeeded
	Failed
)

func (s JobState) String() string {
	switch s {
	case Running:
		return "Running"
	case Succeeded:
		return "Succeeded"
	case Failed:
		return "Failed"
	}
	return fmt.Sprintf("JobState(%d)", int(s))
}

// JoinRequest is an agent's request to take part in the current or next round.
type JoinRequest struct {
	// NodeID is the agent's stable identity (non-empty, at most 253 bytes).
	NodeID string
	// RequestedRank is the node rank the agent asks for (torchrun
	// --node-rank), or -1 for any. Must be below MaxNodes.
	RequestedRank int
	// LocalWorldSize is the number of workers on the node (1..4096).
	LocalWorldSize int
	// Addr is the host the node's workers are reachable at (non-empty).
	Addr string
}

// Limits on Config and JoinRequest fields.
const (
	MaxNodesLimit     = 1 << 20 // largest Config.MaxNodes
	MaxNodeIDLen      = 253     // longest JoinRequest.NodeID, in bytes
	MaxLocalWorldSize = 4096    // largest JoinRequest.LocalWorldSize
)

func (r JoinRequest) validate(c Config) error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, a...)...))
	}
	switch {
	case r.NodeID == "":
		bad("NodeID is empty; every agent needs a stable, unique ID")
	case len(r.NodeID) > MaxNodeIDLen:
		bad("NodeID is %d bytes; use at most %d", len(r.NodeID), MaxNodeIDLen)
	}
	if r.RequestedRank < -1 || r.RequestedRank >= c.MaxNodes {
		bad("RequestedRank is %d; use -1 for any rank or 0..%d (below MaxNodes)", r.RequestedRank, c.MaxNodes-1)
	}
	if r.LocalWorldSize < 1 || r.LocalWorldSize > MaxLocalWorldSize {
		bad("LocalWorldSize is %d; it must be 1..%d", r.LocalWorldSize, MaxLocalWorldSize)
	}
	if r.Addr == "" {
		bad("Addr is empty; give the host the node's workers are reachable at")
	}
	return errors.Join(errs...)
}
