package jobstate

import "github.com/roverml/rover/internal/diagnosis"

// State is a job's whole state: its sub-states, composed. Apply (apply.go)
// applies an event to it, carrying one sub-state's effects on another (a
// loss that returns leases, a check that excludes a node), and says what
// changed; the master's core holds one under its lock and drives it in
// journal order.
type State struct {
	Members  *Membership
	Keys     *Keys
	Failures *Failures // and the diagnoses of the rounds that failed
	Datasets *Datasets
	Memory   *Memory
	Check    *NodeCheck // nil when the job runs none
	Fleet    *Fleet
	// Progress is the job's runtime progress: the one sub-state that is
	// not journaled (outside the snapshot; a restarted master starts it
	// afresh) and that no event of Apply touches.
	Progress *Progress
	// Goodput is the job's goodput accounting: journaled, though what the
	// heartbeats feed it is journaled as its whole state (EventGoodput)
	// rather than one report at a time.
	Goodput *Goodput
	// AutoScale is the job's scaling policy, when the driver enabled it:
	// journaled as its whole state, like Goodput.
	AutoScale *AutoScale

	// What the driver sets, not journaled: Owned says the master runs the
	// job's nodes, Caps what their platform lets a diagnosis do; Live is
	// false while the journal replays (no fleet notices are queued);
	// Hosts is where each managed node runs, as its platform reports it.
	Owned bool
	Caps  diagnosis.Caps
	Live  bool
	Hosts map[string]string

	codec   FailureCodec
	stopped []string // nodes an event's transitions stopped, for Goodput
}

// NewState returns the state of a new job; same compares checkpoint
// storage locations (see Membership), codec encodes the failures.
func NewState(same SameLocation, codec FailureCodec) *State {
	return &State{
		Members:   NewMembership(same),
		Keys:      NewKeys(),
		Failures:  NewFailures(),
		Datasets:  NewDatasets(),
		Memory:    NewMemory(),
		Fleet:     NewFleet(),
		Progress:  NewProgress(),
		Goodput:   NewGoodput(),
		AutoScale: NewAutoScale(),
		codec:     codec,
	}
}
