package shard

import (
	"cmp"
	"slices"
)

// loadProgress builds a dataset with settings cfg (valid, normalized) from
// saved progress p, checking it against cfg. held are the tasks of the
// leases held (restored separately). With strict, p must be a state the
// machine could have reached; without (a checkpoint), Finished is
// recomputed, so a checkpoint may be restored with other Epochs.
func loadProgress(cfg Dataset, p progressJSON, held []task, strict bool) (*dataset, error) {
	d := newDataset(cfg)
	outside := bad // a saved epoch or position the settings do not allow
	if !strict {
		outside = func(format string, a ...any) error { return errorf(ErrConflict, format, a...) }
	}
	if cfg.Mode == Sync {
		d.doing = nil
		if p.Position == nil || len(p.Todo) > 0 || p.Cursor != 0 || p.Done != 0 || p.DoneSamples != 0 ||
			p.EpochDropped != 0 || p.EpochDroppedSamples != 0 || len(p.Dropped) > 0 || p.Appended != 0 || p.Sealed || len(held) > 0 {
			return nil, bad("a Sync dataset needs a position and nothing else")
		}
		pos, err := normPosition(d, *p.Position)
		if err != nil || pos != *p.Position {
			return nil, outside("saved position %+v is not a position of the dataset (%d samples, %d epochs)", *p.Position, cfg.Size, cfg.Epochs)
		}
		d.setPosition(pos)
		if strict && (p.Epoch != d.epoch || p.Finished != d.finished) {
			return nil, bad("epoch %d, finished %v at position %+v", p.Epoch, p.Finished, pos)
		}
		return d, nil
	}
	if p.Position != nil {
		return nil, bad("a Leased dataset has a position")
	}
	switch {
	case p.Epoch < 0 || cfg.Epochs > 0 && p.Epoch >= cfg.Epochs:
		return nil, outside("saved epoch %d is outside the dataset's %d epochs", p.Epoch, cfg.Epochs)
	case !cfg.Streaming && (p.Appended != 0 || p.Sealed):
		return nil, bad("a dataset that is not Streaming has appended samples")
	case p.Appended < 0 || cfg.Size > 0 && (p.Appended > cfg.Size || p.Appended == cfg.Size && !p.Sealed):
		return nil, bad("appended %d (sealed %v) of a stream bounded at %d", p.Appended, p.Sealed, cfg.Size)
	}
	d.epoch, d.appended, d.sealed = p.Epoch, p.Appended, p.Sealed
	if p.Cursor < 0 || p.Cursor > d.limit() {
		return nil, bad("cursor %d outside 0..%d", p.Cursor, d.limit())
	}
	d.cursor = p.Cursor
	// Every position below the cursor is in exactly one queued or held
	// shard, or counted done or dropped.
	var all []task
	for _, t := range p.Todo {
		all = append(all, task{start: t.Start, end: t.End, retries: t.Retries})
	}
	all = append(all, held...)
	rest := d.cursor
	for _, t := range all {
		if t.start < 0 || t.start >= t.end || t.end > d.cursor || t.retries < 0 || t.retries >= cfg.MaxRetries {
			return nil, bad("shard [%d, %d) with %d retries outside cursor %d or MaxRetries %d", t.start, t.end, t.retries, d.cursor, cfg.MaxRetries)
		}
		rest -= t.end - t.start
	}
	for _, s := range p.Dropped {
		if s.Epoch == d.epoch {
			all = append(all, task{start: s.Start, end: s.End})
		}
	}
	sorted := slices.SortedFunc(slices.Values(all), func(a, b task) int { return cmp.Compare(a.start, b.start) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].start < sorted[i-1].end {
			return nil, bad("shards [%d, %d) and [%d, %d) overlap", sorted[i-1].start, sorted[i-1].end, sorted[i].start, sorted[i].end)
		}
	}
	for i := len(p.Todo) - 1; i >= 0; i-- {
		d.pushFront(all[i])
	}
	if err := d.loadCounts(p, rest); err != nil {
		return nil, err
	}
	if strict {
		last := cfg.Streaming || cfg.Epochs > 0 && d.epoch == cfg.Epochs-1
		if done := d.epochDone() && len(held) == 0; p.Finished != done || done && !last {
			return nil, bad("finished %v in epoch %d of %d, with the epoch's shards all done: %v", p.Finished, d.epoch, cfg.Epochs, done)
		}
		d.finished = p.Finished
	}
	return d, nil
}

// loadCounts restores the done and dropped counts and the dropped list;
// rest is the samples below the cursor that are neither queued nor held.
func (d *dataset) loadCounts(p progressJSON, rest int64) error {
	for _, n := range []int64{p.Done, p.DoneSamples, p.EpochDropped, p.EpochDroppedSamples} {
		if n < 0 || n > rest {
			return bad("done %d (%d samples), dropped %d (%d samples): more than the %d samples left", p.Done, p.DoneSamples, p.EpochDropped, p.EpochDroppedSamples, rest)
		}
	}
	if p.DoneSamples+p.EpochDroppedSamples != rest || p.Done > p.DoneSamples || (p.Done == 0) != (p.DoneSamples == 0) {
		return bad("done %d shards (%d samples) and dropped %d (%d samples) do not account for %d samples", p.Done, p.DoneSamples, p.EpochDropped, p.EpochDroppedSamples, rest)
	}
	var n, samples int64
	for _, s := range p.Dropped {
		if s.Epoch < 0 || s.Epoch > d.epoch || s.Start < 0 || s.Start >= s.End || !d.cfg.Streaming && s.End > d.cfg.Size || s.End > d.cursor && s.Epoch == d.epoch {
			return bad("dropped shard %+v out of range", s)
		}
		if s.Epoch == d.epoch {
			n++
			samples += s.End - s.Start
		}
		d.dropped = append(d.dropped, Shard{Epoch: s.Epoch, Start: s.Start, End: s.End})
	}
	if n != p.EpochDropped || samples != p.EpochDroppedSamples {
		return bad("%d dropped shards (%d samples) listed for epoch %d, counted %d (%d samples)", n, samples, d.epoch, p.EpochDropped, p.EpochDroppedSamples)
	}
	d.done, d.doneSamples, d.dropN, d.dropSamples = p.Done, p.DoneSamples, p.EpochDropped, p.EpochDroppedSamples
	return nil
}
