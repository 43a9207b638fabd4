package jobstate

import (
	"encoding/json"
	"fmt"

	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/jobconfig"
)

// SnapshotSchema is the version of the master's snapshot format.
const SnapshotSchema = 1

// snapshot is the encoding of everything a State keeps but liveness,
// which restarts fresh: the state machines as their own MarshalState
// writes them, plus the maps; the failures as the codec encodes them. Its
// JSON must not change: old state dirs restore (internal/master's fixture
// test).
type snapshot struct {
	Schema       int                         `json:"schema"`
	RunID        string                      `json:"run_id"`
	Config       *jobconfig.Config           `json:"config,omitempty"`
	Rendezvous   json.RawMessage             `json:"rendezvous,omitempty"`
	Addrs        map[string]string           `json:"addrs,omitempty"`
	KV           map[string][]byte           `json:"kv,omitempty"`
	Failures     []json.RawMessage           `json:"failures,omitempty"`
	Diagnosis    *diagnosis.History          `json:"diagnosis,omitempty"`
	Shards       json.RawMessage             `json:"shards"`
	LeaseHolders []string                    `json:"lease_holders,omitempty"`
	Held         map[string][]MemorySnapshot `json:"held,omitempty"`
	PeerAddrs    map[string]string           `json:"peer_addrs,omitempty"`
	Memory       *memoryJSON                 `json:"memory,omitempty"`
	Fleet        json.RawMessage             `json:"fleet,omitempty"`
	NodeCheck    json.RawMessage             `json:"node_check,omitempty"`
	Goodput      json.RawMessage             `json:"goodput,omitempty"` // absent before the job's launch, and in older snapshots
	AutoScale    json.RawMessage             `json:"auto_scale,omitempty"`
}

type memoryJSON struct {
	Round    int                     `json:"round"`
	Step     int64                   `json:"step"`
	OK       bool                    `json:"ok"`
	Holders  []MemoryPeer            `json:"holders,omitempty"`
	Fetching []string                `json:"fetching,omitempty"`
	Backups  map[string][]MemoryPeer `json:"backups,omitempty"`
	// Ring is each node's backup peer (absent in older snapshots: none
	// until the next round closes).
	Ring map[string]MemoryPeer `json:"ring,omitempty"`
}

// MarshalSnapshot encodes the state of job runID.
func (st *State) MarshalSnapshot(runID string) ([]byte, error) {
	agreed := st.Memory.Agreement()
	s := snapshot{
		Schema: SnapshotSchema, RunID: runID, Config: st.Members.Config(),
		Addrs: st.Members.Addrs(), KV: st.Keys.Map(), Held: st.Memory.Held(),
		PeerAddrs: st.Memory.PeerAddrs(),
		Memory: &memoryJSON{Round: agreed.Round, Step: agreed.Step, OK: agreed.OK, Holders: agreed.Holders, Fetching: agreed.Fetching,
			Backups: agreed.Backups, Ring: st.Memory.Ring()},
		Fleet: st.Fleet.Saved(),
	}
	var err error
	if s.Rendezvous, err = st.Members.MarshalRendezvous(); err != nil {
		return nil, fmt.Errorf("snapshot the rendezvous: %w", err)
	}
	if st.Check != nil {
		if s.NodeCheck, err = st.Check.Machine().MarshalState(); err != nil {
			return nil, fmt.Errorf("snapshot the node check: %w", err)
		}
	}
	if s.Shards, err = st.Datasets.Machine().MarshalState(); err != nil {
		return nil, fmt.Errorf("snapshot the shards: %w", err)
	}
	for _, f := range st.Failures.Records() {
		b, err := st.codec.Encode(f)
		if err != nil {
			return nil, fmt.Errorf("snapshot a failure record: %w", err)
		}
		s.Failures = append(s.Failures, b)
	}
	if h := st.Failures.History(); h.Len() > 0 {
		s.Diagnosis = &h
	}
	s.LeaseHolders = st.Datasets.Holders()
	if s.Goodput, err = st.Goodput.Marshal(); err != nil {
		return nil, fmt.Errorf("snapshot the goodput: %w", err)
	}
	if s.AutoScale, err = st.AutoScale.Marshal(); err != nil {
		return nil, fmt.Errorf("snapshot the auto-scaling policy: %w", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode the master's snapshot: %w", err)
	}
	return b, nil
}

// RestoreSnapshot replaces the state with b, the snapshot of job runID that
// MarshalSnapshot wrote; the driver's settings (Owned, Caps, Live, Hosts)
// stay.
func (st *State) RestoreSnapshot(b []byte, runID string) error {
	var s snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if s.Schema != SnapshotSchema {
		return fmt.Errorf("the snapshot has schema %d, this master reads schema %d: run the Rover that wrote it", s.Schema, SnapshotSchema)
	}
	if s.RunID != runID {
		return fmt.Errorf("the state belongs to job %q, not %q: pass --job %s, or another state dir", s.RunID, runID, s.RunID)
	}
	if err := st.Members.Restore(s.Config, s.Rendezvous, s.Addrs); err != nil {
		return err
	}
	if s.Config != nil {
		st.Check = nil
		if s.NodeCheck != nil {
			var err error
			if st.Check, err = RestoreNodeCheck(s.NodeCheck); err != nil {
				return err
			}
		}
		st.InitCheck() // a snapshot of a job whose check had not started
	}
	datasets, err := RestoreDatasets(s.Shards, s.LeaseHolders)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	st.Datasets = datasets
	st.Keys = RestoreKeys(s.KV)
	var failures []Failure
	for _, raw := range s.Failures {
		f, err := st.codec.Decode(raw)
		if err != nil {
			return fmt.Errorf("failure record: %w", err)
		}
		failures = append(failures, f)
	}
	var history diagnosis.History
	if s.Diagnosis != nil {
		history = *s.Diagnosis
	}
	st.Failures = RestoreFailures(failures, history)
	st.Fleet = RestoreFleet(s.Fleet)
	var agreed MemoryAgreement
	var ring map[string]MemoryPeer
	if s.Memory != nil {
		agreed = MemoryAgreement{Round: s.Memory.Round, Step: s.Memory.Step, OK: s.Memory.OK,
			Holders: s.Memory.Holders, Fetching: s.Memory.Fetching, Backups: s.Memory.Backups}
		ring = s.Memory.Ring
	}
	st.Memory = RestoreMemory(s.Held, s.PeerAddrs, agreed, ring)
	st.Goodput = NewGoodput()
	if s.Goodput != nil {
		if st.Goodput, err = RestoreGoodput(s.Goodput); err != nil {
			return err
		}
	}
	if err := st.AutoScale.restore(s.AutoScale, false); err != nil {
		return err
	}
	if st.AutoScale.Policy() == nil && st.Members.Configured() {
		_ = st.AutoScale.configure(st.Members.Config().Rendezvous) // an error is kept: AutoScale.Err
	}
	return nil
}
