package jobstate

// State is a job's whole state: its sub-states, composed. The master's
// core holds one under its lock and drives it in journal order; a sub-state
// that changes another's (a loss that returns leases, a check that
// excludes a node) is carried over by the core.
type State struct {
	Members  *Membership
	Keys     *Keys
	Failures *Failures // and the diagnoses of the rounds that failed
	Datasets *Datasets
	Memory   *Memory
	Check    *NodeCheck // nil when the job runs none
	Fleet    *Fleet
}

// NewState returns the state of a new job; same compares checkpoint
// storage locations (see Membership).
func NewState(same SameLocation) *State {
	return &State{
		Members:  NewMembership(same),
		Keys:     NewKeys(),
		Failures: NewFailures(),
		Datasets: NewDatasets(),
		Memory:   NewMemory(),
		Fleet:    NewFleet(),
	}
}
