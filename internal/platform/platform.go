package platform

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Platform creates, deletes and watches the nodes of one job. Implementations
// are safe for concurrent use.
type Platform interface {
	// Create starts the node described by spec. It returns once the platform
	// has accepted the node (a pod object exists, a process is spawned), not
	// once it runs; progress arrives as events. It fails with [ErrExists]
	// when spec.ID is already held, [ErrInvalidSpec] or [ErrUnsupported].
	Create(ctx context.Context, spec NodeSpec) error
	// Delete stops and removes the node. It is idempotent: deleting an
	// unknown or already deleted id returns nil. A Deleted event follows
	// for a node the platform held.
	Delete(ctx context.Context, nodeID string) error
	// Watch calls fn for every event, one call at a time, until ctx ends or
	// the platform fails; it returns ctx.Err() or the failure. It first
	// reports the current state of every node the platform holds, then one
	// Synced event: a node not reported before it is not held. fn must
	// not block for long: it delays every later event.
	Watch(ctx context.Context, fn func(Event)) error
	// Capabilities says which NodeSpec fields the platform honours.
	Capabilities() Capabilities
}

// Capabilities says which optional NodeSpec fields a platform honours; the
// master leaves the others empty (a spec using one fails with ErrUnsupported).
type Capabilities struct {
	Resources  bool // Resources are reserved or limited (Kubernetes requests and limits)
	Image      bool // Image selects the node's container image
	Hosts      bool // nodes run on distinct hosts that events report
	AvoidHosts bool // AvoidHosts is honoured (node anti-affinity)
	// MaxNodes, when above 0, is the platform's capacity: the most nodes
	// of the job it runs at once (the local platform's --max-nodes-here);
	// the nodes created beyond it stay Pending until one ends. 0: no
	// known bound (Kubernetes: the node manager finds the capacity from
	// the pods pending past the pending timeout).
	MaxNodes int
}

// Capacity is MaxNodes, or -1 when the platform knows no bound: the
// capacity the master's auto-scaling reads.
func (c Capabilities) Capacity() int {
	if c.MaxNodes > 0 {
		return c.MaxNodes
	}
	return -1
}

// NodeSpec describes one node to create. Platforms expose Job, Group, Rank
// and Relaunch as labels (Kubernetes: elasticjob.dlrover/name, replica-type,
// rank-index and replica-index, relaunch-count), ID as the node's name (the
// pod's name), and all of them as the agent's environment (NODE_ID, NODE_RANK, NODE_TYPE, ELASTIC_JOB_NAME, and
// ROVER_NODE_ID and PET_NODE_RANK, which `rover run` reads as --node-id and
// --node-rank).
type NodeSpec struct {
	Job      string `json:"job"`      // job name
	Group    string `json:"group"`    // replica type, such as "worker"
	Rank     int    `json:"rank"`     // node rank in the group, kept across relaunches
	Relaunch int    `json:"relaunch"` // 0 for the first node of a rank, +1 per relaunch
	ID       string `json:"id"`       // unique, never reused; a valid DNS label

	Argv []string          `json:"argv"`          // the agent's command line
	Env  map[string]string `json:"env,omitempty"` // extra environment for the agent

	Image      string    `json:"image,omitempty"`       // container image (Capabilities.Image)
	Resources  Resources `json:"resources"`             // zero: the platform's default
	AvoidHosts []string  `json:"avoid_hosts,omitempty"` // hosts known bad, sorted (Capabilities.AvoidHosts)
}

// Resources a node asks for; zero fields mean the platform's default.
type Resources struct {
	MilliCPU    int64 `json:"milli_cpu,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	GPUs        int   `json:"gpus,omitempty"`
}

// IsZero reports whether no resource is asked for.
func (r Resources) IsZero() bool { return r == Resources{} }

// Validate reports every field that is missing or out of range, each wrapping
// [ErrInvalidSpec].
func (s NodeSpec) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, a...)...))
	}
	if s.Job == "" || s.Group == "" {
		bad("job %q and group %q must be set", s.Job, s.Group)
	}
	if !isDNSLabel(s.ID) {
		bad("ID %q is not a DNS label (lower-case letters, digits and '-', at most 63)", s.ID)
	}
	if s.Rank < 0 || s.Relaunch < 0 {
		bad("rank %d and relaunch %d must be 0 or more", s.Rank, s.Relaunch)
	}
	if len(s.Argv) == 0 {
		bad("node %q has no agent command line (Argv)", s.ID)
	}
	if s.Resources.MilliCPU < 0 || s.Resources.MemoryBytes < 0 || s.Resources.GPUs < 0 {
		bad("node %q has negative resources %+v", s.ID, s.Resources)
	}
	return errors.Join(errs...)
}

func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// EventKind is what happened to a node.
type EventKind int

// Event kinds, in the order a node normally passes through them.
const (
	Pending EventKind = iota + 1 // accepted, not yet running (scheduling, pulling images)
	Running                      // the agent process runs
	Exited                       // the agent process ended; ExitCode, Signal and Reason say how
	Deleted                      // the node is gone from the platform; the last event of an id
	// Synced ends Watch's report of the nodes held when it began; it
	// names no node.
	Synced
)

var kindNames = [...]string{Pending: "Pending", Running: "Running", Exited: "Exited", Deleted: "Deleted", Synced: "Synced"}

func (k EventKind) String() string {
	if k >= Pending && k <= Synced {
		return kindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// ReasonOOMKilled is Event.Reason for a node the platform killed for
// memory (Kubernetes' container reason): its replacement gets more memory.
const ReasonOOMKilled = "OOMKilled"

// Event is one observed change of one node.
type Event struct {
	NodeID   string
	Kind     EventKind
	ExitCode int    // Exited: the agent's exit status (128+n when killed by signal n on Kubernetes)
	Signal   int    // Exited: the signal that killed the agent, 0 if none or unknown
	Reason   string // the platform's word, such as "OOMKilled", "Evicted", "Preempted"; may be empty
	Host     string // the host the node runs or ran on, when known
	Time     time.Time
}

// Failed reports whether the event says the node ended without success: it
// exited non-zero or by a signal. Deleted is judged by the caller, who knows
// whether it asked for the delete.
func (e Event) Failed() bool { return e.Kind == Exited && (e.ExitCode != 0 || e.Signal != 0) }

// Describe says in words how the node ended, for logs and failure reasons,
// such as "exited with code 137 (signal 9, OOMKilled) on host-a".
func (e Event) Describe() string {
	var s string
	switch e.Kind {
	case Exited:
		s = fmt.Sprintf("exited with code %d", e.ExitCode)
		switch {
		case e.Signal != 0 && e.Reason != "":
			s += fmt.Sprintf(" (signal %d, %s)", e.Signal, e.Reason)
		case e.Signal != 0:
			s += fmt.Sprintf(" (signal %d)", e.Signal)
		case e.Reason != "":
			s += fmt.Sprintf(" (%s)", e.Reason)
		}
	case Deleted:
		s = "was deleted by the platform"
		if e.Reason != "" {
			s += fmt.Sprintf(" (%s)", e.Reason)
		}
	default:
		s = "is " + e.Kind.String()
	}
	if e.Host != "" {
		s += " on " + e.Host
	}
	return s
}
