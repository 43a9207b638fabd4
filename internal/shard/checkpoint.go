package shard

import (
	"encoding/json"
	"time"
)

type checkpointJSON struct {
	Schema  int        `json:"schema"`
	Dataset configJSON `json:"dataset"`
	progressJSON
}

// DatasetState encodes one dataset's progress as JSON, to be saved with a
// training checkpoint. For a Leased dataset the shards held now become the
// front of the saved queue (by lease ID), followed by the queue itself: a
// restore hands them out again first, since the checkpoint does not contain
// their results. For a Sync dataset it is the Position.
func (m *Machine) DatasetState(name string) ([]byte, error) {
	d := m.datasets[name]
	if d == nil {
		return nil, errorf(ErrUnknownDataset, "no dataset %q is registered", name)
	}
	return json.Marshal(checkpointJSON{Schema: CheckpointSchemaVersion, Dataset: toConfigJSON(d.cfg), progressJSON: d.progress(true)})
}

// RestoreDataset rewinds (or forwards) the registered dataset name to a
// state saved by [Machine.DatasetState], when the job restores the
// checkpoint it was saved with. Every lease held now is revoked: completing
// it, or any lease issued before the restore, is ErrUnknownLease, since its
// result is not in the restored checkpoint. Lease IDs keep increasing.
//
// The saved dataset must have the same sample order as the registered one:
// the same Size, Shuffle, Seed, Mode and Streaming (else ErrConflict naming
// the fields). State of schema 1 is from before shuffled orders changed:
// it is ErrConflict too when its dataset is shuffled and part-way through an
// epoch (see [Machine.CheckOldOrders]). The other settings may differ and the registered ones apply:
// a new ShardSize cuts the rest of the epoch in new sizes (requeued shards
// keep theirs), a retry count at or above a lower MaxRetries is lowered to
// MaxRetries-1, and the saved epoch must be below a new Epochs. A stream
// keeps the larger of its saved and current appended counts, and is sealed
// if either was.
func (m *Machine) RestoreDataset(name string, state []byte, now time.Time) error {
	m.expire(now)
	cur := m.datasets[name]
	if cur == nil {
		return errorf(ErrUnknownDataset, "no dataset %q is registered", name)
	}
	var c checkpointJSON
	if err := decodeStrict(state, &c, &c.Schema, 1, CheckpointSchemaVersion); err != nil {
		return err
	}
	saved, err := c.Dataset.config()
	if err != nil {
		return err
	}
	if s := diff(cur.cfg, saved.normalized(), true); s != "" {
		return errorf(ErrConflict, "dataset %q is registered with %s as saved", name, s)
	}
	p := c.progressJSON
	for i := range p.Todo {
		p.Todo[i].Retries = min(p.Todo[i].Retries, cur.cfg.MaxRetries-1)
	}
	if cur.cfg.Streaming {
		p.Appended, p.Sealed = max(p.Appended, cur.appended), p.Sealed || cur.sealed
	}
	d, err := loadProgress(cur.cfg, p, nil, false)
	if err != nil {
		return err
	}
	if c.Schema < 2 {
		if p := d.oldOrderProblem(); p != "" {
			return errorf(ErrConflict, "%s. Finish the epoch with the Rover that saved the checkpoint, "+
				"or do not restore this dataset's state, and train from where the dataset is now", p)
		}
	}
	for _, l := range cur.heldLeases() {
		m.release(l)
	}
	d.nextID = cur.nextID
	m.datasets[name] = d
	d.settle()
	return nil
}
