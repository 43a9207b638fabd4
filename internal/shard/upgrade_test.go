package shard

import (
	"errors"
	"strings"
	"testing"
)

// upgradeDatasets are, for the tests of state from before shuffled orders
// changed, shuffled datasets part-way through an epoch ("mid", "sync-mid"),
// at an epoch's start ("next", "sync-next"), finished ("done"), and an
// unshuffled one part-way through ("plain").
func upgradeMachine(t *testing.T) *env {
	e := newEnv(t,
		Dataset{Name: "mid", Size: 20, BatchSize: 1, ShardSize: 4, Epochs: 2, Shuffle: true, Seed: 1},
		Dataset{Name: "next", Size: 8, BatchSize: 1, ShardSize: 4, Epochs: 2, Shuffle: true, Seed: 2},
		Dataset{Name: "done", Size: 4, BatchSize: 1, ShardSize: 4, Epochs: 1, Shuffle: true, Seed: 3},
		Dataset{Name: "plain", Size: 20, BatchSize: 1, ShardSize: 4, Epochs: 1},
		Dataset{Name: "sync-mid", Size: 100, BatchSize: 4, Epochs: 2, Shuffle: true, Seed: 4, Mode: Sync},
		Dataset{Name: "sync-next", Size: 100, BatchSize: 4, Epochs: 2, Shuffle: true, Seed: 5, Mode: Sync},
	)
	e.complete("mid", e.lease1("mid", "w", 0, 4), "w", nil)
	e.lease1("mid", "w", 4, 8)
	for range 2 {
		e.complete("next", e.lease1("next", "w", e.status("next").DoneSamples, e.status("next").DoneSamples+4), "w", nil)
	}
	e.complete("done", e.lease1("done", "w", 0, 4), "w", nil)
	e.lease1("plain", "w", 0, 4)
	if err := e.m.Advance("sync-mid", 1, 40, e.now); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Advance("sync-next", 0, 100, e.now); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRestoreOldOrders: state of schema 1 or 2 (an earlier Rover, whose
// shuffled orders differ) is refused when a shuffled dataset is part-way
// through an epoch, naming each such dataset and what to do; without one
// it is restored as it was.
func TestRestoreOldOrders(t *testing.T) {
	e := upgradeMachine(t)
	v3, _ := e.m.MarshalState()
	v2 := strings.Replace(string(v3), `{"schema":3,`, `{"schema":2,`, 1)
	if _, err := Restore([]byte(v3)); err != nil {
		t.Fatalf("Restore of the current schema: %v", err)
	}
	_, err := Restore([]byte(v2))
	if !errors.Is(err, ErrBadState) {
		t.Fatalf("Restore of schema 2 part-way through shuffled epochs: %v", err)
	}
	for _, want := range []string{`"mid" is part-way through shuffled epoch 0 (8 of 20 positions`, `"sync-mid" is part-way through shuffled epoch 1 (40 of 100`,
		"earlier Rover", "Finish the epoch with the Rover that saved the state, then upgrade"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	for _, fine := range []string{`"next"`, `"done"`, `"plain"`, `"sync-next"`} {
		if strings.Contains(err.Error(), fine) {
			t.Errorf("error names %s, which can carry on:\n%v", fine, err)
		}
	}

	// Once the shuffled epochs are at their ends, the same state restores.
	for _, l := range e.lease("mid", "w", 10).Shards {
		e.complete("mid", l, "w", nil)
	}
	for e.status("mid").Epoch == 0 {
		e.m.WorkerLost("w", e.now)
		for _, l := range e.lease("mid", "w", 10).Shards {
			e.complete("mid", l, "w", nil)
		}
	}
	if err := e.m.Advance("sync-mid", 1, 100, e.now); err != nil {
		t.Fatal(err)
	}
	v3, _ = e.m.MarshalState()
	for _, old := range []string{`{"schema":2,`, `{"schema":1,`} {
		data := strings.Replace(string(v3), `{"schema":3,`, old, 1)
		m, err := Restore([]byte(data))
		if err != nil {
			t.Fatalf("Restore of %s at epoch boundaries: %v\n%s", old, err, data)
		}
		cmpMachines(t, e.m, m)
	}
	if err := e.m.CheckOldOrders(); err != nil {
		t.Fatalf("CheckOldOrders at epoch boundaries: %v", err)
	}
}

// TestRestoreDatasetOldOrders: a checkpoint's dataset state of schema 1 is
// refused (ErrConflict) for a shuffled dataset part-way through an epoch,
// and restored otherwise.
func TestRestoreDatasetOldOrders(t *testing.T) {
	e := upgradeMachine(t)
	for _, tt := range []struct {
		name string
		ok   bool
	}{{"mid", false}, {"sync-mid", false}, {"next", true}, {"done", true}, {"plain", true}, {"sync-next", true}} {
		saved, err := e.m.DatasetState(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.m.RestoreDataset(tt.name, saved, e.now); err != nil {
			t.Errorf("%s: RestoreDataset of the current schema: %v", tt.name, err)
		}
		old := strings.Replace(string(saved), `{"schema":2,`, `{"schema":1,`, 1)
		err = e.m.RestoreDataset(tt.name, []byte(old), e.now)
		switch {
		case tt.ok && err != nil:
			t.Errorf("%s: RestoreDataset of schema 1: %v", tt.name, err)
		case !tt.ok && (!errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "part-way through shuffled epoch") ||
			!strings.Contains(err.Error(), "do not restore this dataset's state")):
			t.Errorf("%s: RestoreDataset of schema 1 part-way through a shuffled epoch: %v", tt.name, err)
		}
		e.check()
	}
}

// TestRestoreOldShardSize: state from before the limit on shuffled shards
// is refused, naming the field, when a shuffled dataset's shards are larger.
func TestRestoreOldShardSize(t *testing.T) {
	e := newEnv(t, Dataset{Name: "d", Size: 1 << 30, BatchSize: 1, ShardSize: MaxLeaseSamples, Shuffle: true})
	v3, _ := e.m.MarshalState()
	old := strings.Replace(string(v3), `"shard_size":524288`, `"shard_size":1048576`, 1)
	old = strings.Replace(old, `{"schema":3,`, `{"schema":2,`, 1)
	if _, err := Restore([]byte(old)); !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), "ShardSize is 1048576") {
		t.Fatalf("Restore of a shuffled dataset with shards over the limit: %v", err)
	}
}
