package shard

import (
	"slices"
	"sort"
)

// Status is one dataset's progress, a copy safe to keep.
//
// In Leased mode the counts are of the current epoch, and every shard of it
// is in exactly one of Todo, Doing, Done or EpochDropped; in samples,
// TodoSamples + DoingSamples + DoneSamples + EpochDroppedSamples is Size
// (for a stream: the samples appended, less Buffered).
type Status struct {
	Dataset Dataset // as registered, with defaults filled in
	// Epoch is the epoch in progress (from 0). Once a Leased dataset is
	// finished it stays at the last epoch; a finished Sync dataset is at
	// Epochs (its Position is {Epochs, 0}).
	Epoch    int
	Finished bool

	Todo, Doing, Done, EpochDropped                             int64 // shards
	TodoSamples, DoingSamples, DoneSamples, EpochDroppedSamples int64
	// Dropped lists every shard dropped after MaxRetries failures, in every
	// epoch, in the order they were dropped (without Samples: use
	// [EpochOrder] to expand them).
	Dropped []Shard
	// Workers lists the workers holding leases of the dataset, sorted.
	Workers []string

	// Streaming only.
	Appended int64 // samples appended so far
	Sealed   bool
	Buffered int64 // samples appended but not yet cut into a shard

	// Sync only.
	Position Position
}

// Status returns a dataset's Status, in O(leases held) time.
func (m *Machine) Status(dataset string) (Status, error) {
	d := m.datasets[dataset]
	if d == nil {
		return Status{}, errorf(ErrUnknownDataset, "no dataset %q is registered", dataset)
	}
	s := Status{Dataset: d.cfg, Epoch: d.epoch, Finished: d.finished, Position: d.pos}
	if d.cfg.Mode == Sync {
		return s, nil
	}
	cut := d.cutShards()
	s.Todo = int64(len(d.retry)) + cut
	s.Doing, s.Done, s.EpochDropped = int64(len(d.doing)), d.done, d.dropN
	s.DoingSamples, s.DoneSamples, s.EpochDroppedSamples = d.doingSamples, d.doneSamples, d.dropSamples
	s.TodoSamples = d.retrySamples + d.cutSamples()
	s.Dropped = slices.Clone(d.dropped)
	seen := map[string]bool{}
	for _, l := range d.doing {
		if !seen[l.w.name] {
			seen[l.w.name] = true
			s.Workers = append(s.Workers, l.w.name)
		}
	}
	sort.Strings(s.Workers)
	if d.cfg.Streaming {
		s.Appended, s.Sealed = d.appended, d.sealed
		s.Buffered = d.limit() - d.cursor - d.cutSamples()
	}
	return s, nil
}

// Datasets returns the names of the registered datasets, sorted.
func (m *Machine) Datasets() []string {
	names := make([]string, 0, len(m.datasets))
	for name := range m.datasets {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
