package nodemanager

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/roverml/rover/internal/platform"
)

// Defaults and limits, as DLRover has them.
const (
	DefaultRestartCount   = 3                // relaunches per node (replica spec restartCount)
	MaxRestartCount       = 5                // restartCount is capped here
	DefaultPendingTimeout = 15 * time.Minute // DLRover's pending_timeout, 900 s
	DefaultPendingRetry   = 10 * time.Minute // how long a capacity found by a pending timeout holds
	DefaultGroup          = "worker"
)

// PendingStrategy says what a node pending past Spec.PendingTimeout does to
// the job (DLRover's pending_fail_strategy).
type PendingStrategy int

const (
	// PendingNecessary (the default, DLRover's 1): fail the job when a
	// critical node, or so many nodes that the group has fewer than its
	// minimum that are not timed-out pending, pend past the timeout.
	PendingNecessary PendingStrategy = iota
	// PendingSkip (DLRover's 0 and -1): never fail for pending nodes.
	PendingSkip
	// PendingAll (DLRover's 2): fail the job as soon as any node pends
	// past the timeout.
	PendingAll
)

// Spec is the job's desired nodes and the rules for replacing them.
type Spec struct {
	Job    string      `json:"job"` // job name, the prefix of node ids
	Groups []GroupSpec `json:"groups"`
	// MaxRelaunches bounds relaunches over the whole job; 0: no job-wide
	// bound (only each node's RestartCount).
	MaxRelaunches int `json:"max_relaunches,omitempty"`
	// PendingTimeout: how long a node may stay pending (created, not yet
	// running) before PendingStrategy applies. 0: DefaultPendingTimeout;
	// negative: never time out.
	PendingTimeout  time.Duration   `json:"pending_timeout,omitempty"`
	PendingStrategy PendingStrategy `json:"pending_strategy,omitempty"`
	// PendingRetry: how long the capacity that nodes timing out pending
	// showed ([Manager.Capacity]) holds before it is forgotten, so the
	// job may probe for capacity that appeared. 0: DefaultPendingRetry;
	// negative: never forgotten.
	PendingRetry time.Duration `json:"pending_retry,omitempty"`
	// RightSize sets each relaunched or rescaled node's requests from what
	// its rank used (rightsize.go); only for platforms that honour
	// Resources. ResourceLimits is the most the whole job may use (zero
	// fields: no bound), shared evenly among the groups' MaxNodes.
	RightSize      bool               `json:"right_size,omitempty"`
	ResourceLimits platform.Resources `json:"resource_limits,omitempty"`
}

// GroupSpec is one replica type: how many nodes, how to start them, and how
// often each may be relaunched.
type GroupSpec struct {
	Name     string `json:"name"` // "" means DefaultGroup
	MinNodes int    `json:"min_nodes"`
	MaxNodes int    `json:"max_nodes"` // the most nodes the group may have, ranks 0..MaxNodes-1
	// Nodes is how many nodes Start creates, ranks 0..Nodes-1, within
	// [MinNodes, MaxNodes]; 0 means MaxNodes. [Manager.Scale] changes it.
	Nodes int `json:"nodes,omitempty"`
	// RestartCount is each node's relaunch budget. 0: DefaultRestartCount;
	// -1: never relaunch; at most MaxRestartCount.
	RestartCount int `json:"restart_count,omitempty"`
	// RestartCounts overrides RestartCount for some ranks (DLRover's
	// criticalNodes "RANK:RELAUNCHES"); the values read as RestartCount.
	RestartCounts map[int]int `json:"restart_counts,omitempty"`
	CriticalRanks []int       `json:"critical_ranks,omitempty"` // ranks whose loss fails the job
	// DecidesJob: once every node of the group has exited successfully,
	// the job has succeeded ([SucceedJob]), whatever the other groups do:
	// a parameter-server job's chief group, or its worker group when it
	// has no chief, as DLRover decides. Groups whose agents rendezvous
	// leave it unset: the rendezvous decides their success.
	DecidesJob bool `json:"decides_job,omitempty"`
	// Agentless: the group's nodes run their program directly, with no
	// agent (a parameter-server job's roles): they never rendezvous nor
	// learn the job's outcome, so once the job ends the master deletes
	// them at once rather than wait for them to exit.
	Agentless bool               `json:"agentless,omitempty"`
	Argv      []string           `json:"argv"`
	Env       map[string]string  `json:"env,omitempty"`
	Image     string             `json:"image,omitempty"`
	Resources platform.Resources `json:"resources"`
	// MemoryLimit is each node's memory in bytes when Resources asks for
	// none but the platform gives some (a pod template's limit): what a
	// node killed for memory grows from. 0: unknown.
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// MilliCPU is each node's CPU request in thousandths of a core when
	// Resources asks for none but the platform's template does: what
	// right-sizing compares the workers' CPU use with. 0: unknown.
	MilliCPU int64 `json:"milli_cpu,omitempty"`
}

// budget is the relaunch budget of the group's node of rank, after
// defaults.
func (g GroupSpec) budget(rank int) int {
	n, ok := g.RestartCounts[rank]
	if !ok {
		n = g.RestartCount
	}
	switch {
	case n == 0:
		return DefaultRestartCount
	case n < 0:
		return 0
	}
	return n
}

// nodes is how many nodes the group starts with.
func (g GroupSpec) nodes() int {
	if g.Nodes == 0 {
		return g.MaxNodes
	}
	return g.Nodes
}

func (g GroupSpec) name() string {
	if g.Name == "" {
		return DefaultGroup
	}
	return g.Name
}

func (s Spec) pendingTimeout() time.Duration {
	if s.PendingTimeout == 0 {
		return DefaultPendingTimeout
	}
	return s.PendingTimeout
}

func (s Spec) pendingRetry() time.Duration {
	if s.PendingRetry == 0 {
		return DefaultPendingRetry
	}
	return s.PendingRetry
}

// Validate reports every field out of range, each wrapping [ErrInvalidSpec].
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, a...)...))
	}
	probe := platform.NodeSpec{Job: s.Job, Group: DefaultGroup, ID: nodeID(s.Job, DefaultGroup, 999, MaxRestartCount), Argv: []string{"x"}}
	if s.Job == "" || probe.Validate() != nil {
		bad("Job %q must be a short DNS label (lower-case letters, digits, '-')", s.Job)
	}
	if len(s.Groups) == 0 {
		bad("Groups is empty; give at least one group of nodes")
	}
	if s.MaxRelaunches < 0 {
		bad("MaxRelaunches is %d; use 0 for no job-wide bound or a positive number", s.MaxRelaunches)
	}
	if s.PendingStrategy < PendingNecessary || s.PendingStrategy > PendingAll {
		bad("PendingStrategy is %d; want PendingNecessary, PendingSkip or PendingAll", s.PendingStrategy)
	}
	if l := s.ResourceLimits; l.MilliCPU < 0 || l.MemoryBytes < 0 || l.GPUs < 0 {
		bad("ResourceLimits %+v has a negative field; give the most the whole job may use, or 0 for no bound", l)
	}
	seen := map[string]bool{}
	for i, g := range s.Groups {
		name := g.name()
		if seen[name] {
			bad("Groups[%d]: group %q listed twice", i, name)
		}
		seen[name] = true
		if p := (platform.NodeSpec{Job: "j", Group: name, ID: name, Argv: []string{"x"}}); p.Validate() != nil {
			bad("Groups[%d].Name %q must be a DNS label", i, name)
		}
		if g.MinNodes < 0 || g.MaxNodes < 1 || g.MinNodes > g.MaxNodes {
			bad("Groups[%d] (%s): MinNodes %d, MaxNodes %d; want 0 <= MinNodes <= MaxNodes, MaxNodes >= 1", i, name, g.MinNodes, g.MaxNodes)
		}
		if g.Nodes != 0 && (g.Nodes < max(g.MinNodes, 1) || g.Nodes > g.MaxNodes) {
			bad("Groups[%d] (%s): Nodes %d is outside MinNodes %d..MaxNodes %d; give a count in that range, or 0 for MaxNodes", i, name, g.Nodes, g.MinNodes, g.MaxNodes)
		}
		if g.RestartCount < -1 || g.RestartCount > MaxRestartCount {
			bad("Groups[%d] (%s): RestartCount %d; want -1 (never), 0 (default %d) or up to %d", i, name, g.RestartCount, DefaultRestartCount, MaxRestartCount)
		}
		for r, n := range g.RestartCounts {
			if r < 0 || r >= g.MaxNodes || n < -1 || n > MaxRestartCount {
				bad("Groups[%d] (%s): RestartCounts[%d] = %d; want a rank in 0..%d and -1, 0 or up to %d", i, name, r, n, g.MaxNodes-1, MaxRestartCount)
			}
		}
		for _, r := range g.CriticalRanks {
			if r < 0 || r >= g.MaxNodes {
				bad("Groups[%d] (%s): critical rank %d is not in 0..%d", i, name, r, g.MaxNodes-1)
			}
		}
		if len(g.Argv) == 0 {
			bad("Groups[%d] (%s): Argv is empty; give the agent's command line", i, name)
		}
	}
	return errors.Join(errs...)
}

// nodeID names the node of rank in group after relaunch relaunches:
// "<job>-<group>-<rank>-<relaunch>", such as "train-worker-3-1". It is unique
// for the job's lifetime because (group, rank, relaunch) never repeats.
func nodeID(job, group string, rank, relaunch int) string {
	return fmt.Sprintf("%s-%s-%d-%d", job, group, rank, relaunch)
}

func (g GroupSpec) critical(rank int) bool { return slices.Contains(g.CriticalRanks, rank) }
