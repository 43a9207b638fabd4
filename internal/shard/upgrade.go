package shard

import (
	"errors"
	"fmt"
)

// Shuffled orders changed with schema 3 of the persisted state
// ([SchemaVersion]) and schema 2 of a checkpoint's dataset state
// ([CheckpointSchemaVersion]): Rover shuffled with a Fisher–Yates permutation
// before, and with the Feistel network of [EpochOrder] since. Saved progress
// is a count of positions, so state from before, restored part-way through a
// shuffled epoch, would train the rest of that epoch's positions in the new
// order: some samples twice, others not at all. Such state is refused,
// saying what to do; an epoch boundary (or a finished dataset) is the same
// in both orders, and is accepted. Shards dropped before ([Status].Dropped)
// still name positions of the old orders.

// oldOrderProblem describes why d, restored from state that used the old
// shuffled orders, cannot carry on; "" when it can.
func (d *dataset) oldOrderProblem() string {
	if !d.cfg.Shuffle || d.finished || d.cfg.Mode == Leased && d.epochDone() {
		return "" // a Leased epoch whose shards are all done is over
	}
	done := d.cursor // Leased: positions handed out in the epoch
	if d.cfg.Mode == Sync {
		done = d.pos.Consumed
	}
	if done == 0 {
		return ""
	}
	return fmt.Sprintf("dataset %q is part-way through shuffled epoch %d (%d of %d positions handed out) in state saved by an earlier Rover, "+
		"whose shuffled orders differ from this one's: carrying on would train some samples twice and others not at all",
		d.cfg.Name, d.epoch, done, d.cfg.Size)
}

// CheckOldOrders returns an error wrapping [ErrBadState] for every shuffled
// dataset that is part-way through an epoch, or nil. The caller calls it on
// state written before shuffled orders changed ([Restore] does, for schema 1
// and 2): the master after replaying journal records of an earlier Rover.
func (m *Machine) CheckOldOrders() error {
	var errs []error
	for _, name := range m.Datasets() {
		if p := m.datasets[name].oldOrderProblem(); p != "" {
			errs = append(errs, bad("%s. Finish the epoch with the Rover that saved the state, then upgrade; "+
				"or start the job without this state (another --state-dir)", p))
		}
	}
	return errors.Join(errs...)
}
