package master

// The core's snapshot is its jobstate.State's (State.MarshalSnapshot),
// marked with the job's run ID.

// marshalStateLocked snapshots the core.
func (c *core) marshalStateLocked() ([]byte, error) {
	return c.st.MarshalSnapshot(c.runID)
}

// restoreStateLocked replaces the core's state with a snapshot.
func (c *core) restoreStateLocked(b []byte) error {
	return c.st.RestoreSnapshot(b, c.runID)
}
