package jobstate

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/roverml/rover/internal/autoscale"

	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/rendezvous"
)

// JournalSchema is the version of the records the master appends to its
// Store. Schema 2 records the same events as 1, applied with the shuffled
// orders of shard schema 3 ([shard.SchemaVersion]); the master replays
// records of schema 1 too, then checks that no shuffled dataset is left
// part-way through an epoch.
const JournalSchema = 2

// Event is one transition of a job's state, and one record of the
// master's journal, as its JSON encoding (which must not change: old
// journals replay). The state machines are deterministic, so replaying the
// journal rebuilds the state exactly.
type Event struct {
	Schema int       `json:"schema"`
	Type   EventType `json:"type"`
	Time   time.Time `json:"time"`
	Node   string    `json:"node,omitempty"`
	Round  int       `json:"round,omitempty"`
	// Config is set on EventConfigure.
	Config *jobconfig.Config `json:"config,omitempty"`
	// Join and Snapshots are set on EventJoin.
	Join      *rendezvous.JoinRequest `json:"join,omitempty"`
	Snapshots []MemorySnapshot        `json:"snapshots,omitempty"`
	// PeerAddr is where the node's agent serves its snapshots to peers
	// (EventJoin; "": it serves none).
	PeerAddr string `json:"peer_addr,omitempty"`
	// PeerRestoreFailed: the joining node could not fetch its last round's
	// agreed step from its peers (JoinRequest.peer_restore_failed).
	PeerRestoreFailed bool `json:"peer_restore_failed,omitempty"`
	// Key and Value are set on EventSetKey.
	Key   string `json:"key,omitempty"`
	Value []byte `json:"value,omitempty"`
	// Failures are set on EventWorkerFailed, as protobuf JSON.
	Failures []json.RawMessage `json:"failures,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	// Since is set on EventNodeLost when the loss's time is known.
	Since time.Time `json:"since,omitzero"`
	// Planned is set on EventNodeLost for a node scaled away: a
	// departure, not a failure, so nothing is blamed.
	Planned bool `json:"planned,omitempty"`
	// Shard is set on the shard events.
	Shard *ShardEvent `json:"shard,omitempty"`
	// Batch is set on EventShardBatch: shard events applied in order, at Time.
	Batch []BatchOp `json:"batch,omitempty"`
	// Fleet is set on EventFleet: the node manager's MarshalState.
	Fleet json.RawMessage `json:"fleet,omitempty"`
	// Nodes is set on EventFleet: the nodes the manager runs (pending or
	// running), which the rendezvous expects (rendezvous.Machine.Expect).
	Nodes int `json:"nodes,omitempty"`
	// Check is set on EventCheckReport; Round is the world checked.
	Check *CheckReport `json:"check,omitempty"`
	// Declare is set on EventDeclareStorage.
	Declare *StorageDeclaration `json:"declare,omitempty"`
	// DiedAt is set on EventWorkerFailed when the master knows when the
	// worker died, in its own clock.
	DiedAt time.Time `json:"died_at,omitzero"`
	// Goodput is set on EventGoodput: the goodput accounting's whole state
	// (Goodput.Marshal).
	Goodput json.RawMessage `json:"goodput,omitempty"`
	// AutoScale is set on EventAutoScale: the scaling policy's whole state
	// (AutoScale.Marshal), and Decision the change it decided, if any.
	AutoScale json.RawMessage     `json:"auto_scale,omitempty"`
	Decision  *autoscale.Decision `json:"decision,omitempty"`
}

// CheckReport is a node's result of one node check group, set on
// EventCheckReport.
type CheckReport struct {
	Stage  int              `json:"stage"`
	Group  int              `json:"group"`
	Result nodecheck.Result `json:"result"`
}

// EventType names an event in the journal.
type EventType string

// The events of membership and rounds, keys, failures, the fleet, the node
// check and the configuration.
const (
	EventConfigure     EventType = "configure"
	EventJoin          EventType = "join"
	EventNodeLost      EventType = "node_lost"
	EventWorkerFailed  EventType = "worker_failed"
	EventNodeSucceeded EventType = "node_succeeded"
	EventSetKey        EventType = "set_key"
	EventTick          EventType = "tick"
	// EventFleet records the node manager's whole state (Fleet), before
	// the commands it decided are carried out.
	EventFleet EventType = "fleet"
	// EventFailNodes fails the job for Reason: the node manager could not
	// keep its nodes.
	EventFailNodes EventType = "fail_nodes"
	// EventSucceedNodes ends the job as succeeded: the node manager saw
	// the nodes that decide its outcome succeed (a parameter-server
	// job's chief, or all its workers).
	EventSucceedNodes EventType = "succeed_nodes"
	// EventCancel ends the job for Reason: its user stopped it.
	EventCancel EventType = "cancel"
	// EventCheckReport records a node's result of a node check group
	// (Node, Round, Check); EventCheckTick ends a check stage at its
	// deadline.
	EventCheckReport EventType = "node_check_report"
	EventCheckTick   EventType = "node_check_tick"
	// EventDeclareStorage records a checkpointer's declaration of the
	// job's checkpoint storage (Declare) that changed it.
	EventDeclareStorage EventType = "declare_storage"
	// EventGoodput records the goodput accounting's whole state (Goodput),
	// with what the heartbeats fed it since the last one.
	EventGoodput EventType = "goodput"
	// EventAutoScale records the scaling policy's whole state (AutoScale)
	// and the change it decided (Decision), before the change is made.
	EventAutoScale EventType = "auto_scale"
)

// The dataset events (Datasets), each with its Shard.
const (
	EventRegisterDataset EventType = "register_dataset"
	EventLease           EventType = "lease"
	EventCompleteShards  EventType = "complete_shards"
	EventAdvance         EventType = "advance"
	EventAppend          EventType = "append"
	EventRestoreDataset  EventType = "restore_dataset"
	EventShardTick       EventType = "shard_tick"
	// EventShardBatch applies the lease and complete events of one
	// BatchShards call (Batch), in order, as one journal record.
	EventShardBatch EventType = "shard_batch"
)

// Marshal encodes the event as a journal record of the current schema.
func (e *Event) Marshal() ([]byte, error) {
	e.Schema = JournalSchema
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	return b, nil
}

// UnmarshalEvent decodes a journal record.
func UnmarshalEvent(b []byte) (*Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("decode journal record: %w", err)
	}
	if e.Schema < 1 || e.Schema > JournalSchema {
		return nil, fmt.Errorf("journal record has schema %d, this master reads schemas 1 to %d", e.Schema, JournalSchema)
	}
	return &e, nil
}
