package master

import (
	"encoding/json"
	"fmt"

	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/master/jobstate"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
	"google.golang.org/protobuf/encoding/protojson"
)

// stateSchema is the version of the master's snapshot format.
const stateSchema = 1

// coreState is a snapshot of everything the core keeps but liveness, which
// restarts fresh: the state machines as their own MarshalState writes them,
// plus the core's maps.
type coreState struct {
	Schema       int                                  `json:"schema"`
	RunID        string                               `json:"run_id"`
	Config       *jobconfig.Config                    `json:"config,omitempty"`
	Rendezvous   json.RawMessage                      `json:"rendezvous,omitempty"`
	Addrs        map[string]string                    `json:"addrs,omitempty"`
	KV           map[string][]byte                    `json:"kv,omitempty"`
	Failures     []json.RawMessage                    `json:"failures,omitempty"`
	Diagnosis    *diagnosis.History                   `json:"diagnosis,omitempty"`
	Shards       json.RawMessage                      `json:"shards"`
	LeaseHolders []string                             `json:"lease_holders,omitempty"`
	Held         map[string][]jobstate.MemorySnapshot `json:"held,omitempty"`
	Memory       *memoryJSON                          `json:"memory,omitempty"`
	Fleet        json.RawMessage                      `json:"fleet,omitempty"`
	NodeCheck    json.RawMessage                      `json:"node_check,omitempty"`
}

type memoryJSON struct {
	Round int   `json:"round"`
	Step  int64 `json:"step"`
	OK    bool  `json:"ok"`
}

// marshalStateLocked snapshots the core.
func (c *core) marshalStateLocked() ([]byte, error) {
	agreed := c.st.Memory.Agreement()
	s := coreState{
		Schema: stateSchema, RunID: c.runID, Config: c.st.Members.Config(),
		Addrs: c.st.Members.Addrs(), KV: c.st.Keys.Map(), Held: c.st.Memory.Held(),
		Memory: &memoryJSON{Round: agreed.Round, Step: agreed.Step, OK: agreed.OK},
		Fleet:  c.st.Fleet.Saved(),
	}
	var err error
	if s.Rendezvous, err = c.st.Members.MarshalRendezvous(); err != nil {
		return nil, fmt.Errorf("snapshot the rendezvous: %w", err)
	}
	if c.st.Check != nil {
		if s.NodeCheck, err = c.st.Check.Machine().MarshalState(); err != nil {
			return nil, fmt.Errorf("snapshot the node check: %w", err)
		}
	}
	if s.Shards, err = c.st.Datasets.Machine().MarshalState(); err != nil {
		return nil, fmt.Errorf("snapshot the shards: %w", err)
	}
	for _, f := range c.st.Failures.Records() {
		b, err := protojson.Marshal(failureProto(f))
		if err != nil {
			return nil, fmt.Errorf("snapshot a failure record: %w", err)
		}
		s.Failures = append(s.Failures, b)
	}
	if h := c.st.Failures.History(); h.Len() > 0 {
		s.Diagnosis = &h
	}
	s.LeaseHolders = c.st.Datasets.Holders()
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode the master's snapshot: %w", err)
	}
	return b, nil
}

// restoreStateLocked replaces the core's state with a snapshot.
func (c *core) restoreStateLocked(b []byte) error {
	var s coreState
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if s.Schema != stateSchema {
		return fmt.Errorf("the snapshot has schema %d, this master reads schema %d: run the Rover that wrote it", s.Schema, stateSchema)
	}
	if s.RunID != c.runID {
		return fmt.Errorf("the state belongs to job %q, not %q: pass --job %s, or another state dir", s.RunID, c.runID, s.RunID)
	}
	if err := c.st.Members.Restore(s.Config, s.Rendezvous, s.Addrs); err != nil {
		return err
	}
	if s.Config != nil {
		var err error
		c.st.Check = nil
		if s.NodeCheck != nil {
			if c.st.Check, err = jobstate.RestoreNodeCheck(s.NodeCheck); err != nil {
				return err
			}
		}
		c.st.InitCheck() // a snapshot of a job whose check had not started
	}
	datasets, err := jobstate.RestoreDatasets(s.Shards, s.LeaseHolders)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	c.st.Datasets = datasets
	c.st.Keys = jobstate.RestoreKeys(s.KV)
	var failures []jobstate.Failure
	for _, raw := range s.Failures {
		f := &roverv1.WorkerFailure{}
		if err := protojson.Unmarshal(raw, f); err != nil {
			return fmt.Errorf("failure record: %w", err)
		}
		failures = append(failures, failureFromProto(f))
	}
	var history diagnosis.History
	if s.Diagnosis != nil {
		history = *s.Diagnosis
	}
	c.st.Failures = jobstate.RestoreFailures(failures, history)
	c.st.Fleet = jobstate.RestoreFleet(s.Fleet)
	var agreed jobstate.MemoryAgreement
	if s.Memory != nil {
		agreed = jobstate.MemoryAgreement{Round: s.Memory.Round, Step: s.Memory.Step, OK: s.Memory.OK}
	}
	c.st.Memory = jobstate.RestoreMemory(s.Held, agreed)
	return nil
}
