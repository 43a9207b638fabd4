package master

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/rendezvous"
)

// journalSchema is the version of the records the master appends to its
// Store. Schema 2 records the same events as 1, applied with the shuffled
// orders of shard schema 3 ([shard.SchemaVersion]); the master replays
// records of schema 1 too, then checks that no shuffled dataset is left
// part-way through an epoch (see core.restore).
const journalSchema = 2

// event is one transition of the master's state. The state machines are
// deterministic, so replaying the journal rebuilds the state exactly.
type event struct {
	Schema int       `json:"schema"`
	Type   eventType `json:"type"`
	Time   time.Time `json:"time"`
	Node   string    `json:"node,omitempty"`
	Round  int       `json:"round,omitempty"`
	// Config is set on eventConfigure.
	Config *jobconfig.Config `json:"config,omitempty"`
	// Join and Snapshots are set on eventJoin.
	Join      *rendezvous.JoinRequest   `json:"join,omitempty"`
	Snapshots []jobstate.MemorySnapshot `json:"snapshots,omitempty"`
	// Key and Value are set on eventSetKey.
	Key   string `json:"key,omitempty"`
	Value []byte `json:"value,omitempty"`
	// Failures are set on eventWorkerFailed, as protobuf JSON.
	Failures []json.RawMessage `json:"failures,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	// Since is set on eventNodeLost when the loss's time is known.
	Since time.Time `json:"since,omitzero"`
	// Planned is set on eventNodeLost for a node scaled away: a
	// departure, not a failure, so nothing is blamed.
	Planned bool `json:"planned,omitempty"`
	// Shard is set on the shard events (shards.go).
	Shard *jobstate.ShardEvent `json:"shard,omitempty"`
	// Batch is set on eventShardBatch: shard events applied in order, at Time.
	Batch []jobstate.BatchOp `json:"batch,omitempty"`
	// Fleet is set on eventFleet: the node manager's MarshalState.
	Fleet json.RawMessage `json:"fleet,omitempty"`
	// Nodes is set on eventFleet: the nodes the manager runs (pending or
	// running), which the rendezvous expects (rendezvous.Machine.Expect).
	Nodes int `json:"nodes,omitempty"`
	// Check is set on eventCheckReport (nodecheck.go); Round is the world
	// checked.
	Check *checkReport `json:"check,omitempty"`
	// Declare is set on eventDeclareStorage (declare.go).
	Declare *jobstate.StorageDeclaration `json:"declare,omitempty"`
}

type eventType string

const (
	eventConfigure     eventType = "configure"
	eventJoin          eventType = "join"
	eventNodeLost      eventType = "node_lost"
	eventWorkerFailed  eventType = "worker_failed"
	eventNodeSucceeded eventType = "node_succeeded"
	eventSetKey        eventType = "set_key"
	eventTick          eventType = "tick"
	// eventFleet records the node manager's whole state (Fleet), before
	// the commands it decided are carried out.
	eventFleet eventType = "fleet"
	// eventFailNodes fails the job for Reason: the node manager could not
	// keep its nodes.
	eventFailNodes eventType = "fail_nodes"
	// eventCancel ends the job for Reason: its user stopped it.
	eventCancel eventType = "cancel"
	// eventCheckReport records a node's result of a node check group
	// (Node, Round, Check); eventCheckTick ends a check stage at its
	// deadline.
	eventCheckReport eventType = "node_check_report"
	eventCheckTick   eventType = "node_check_tick"
	// eventDeclareStorage records a checkpointer's declaration of the
	// job's checkpoint storage (Declare) that changed it.
	eventDeclareStorage eventType = "declare_storage"
)

func (e *event) marshal() ([]byte, error) {
	e.Schema = journalSchema
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	return b, nil
}

func unmarshalEvent(b []byte) (*event, error) {
	var e event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("decode journal record: %w", err)
	}
	if e.Schema < 1 || e.Schema > journalSchema {
		return nil, fmt.Errorf("journal record has schema %d, this master reads schemas 1 to %d", e.Schema, journalSchema)
	}
	return &e, nil
}
