package shard

import (
	"math"
	"time"
)

// Append extends a Streaming dataset by n >= 0 samples and returns the
// stream's new end (the number of samples appended so far). Shards are cut
// from the stream in ShardSize pieces; a trailing partial shard is handed
// out only once it is full or the stream is sealed. A bounded stream (Size
// > 0) seals itself when it reaches Size; appending past Size, or to a
// sealed stream, is ErrSealed.
func (m *Machine) Append(dataset string, n int64, now time.Time) (int64, error) {
	m.expire(now)
	d, err := m.stream(dataset)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return d.appended, errorf(ErrInvalidRequest, "cannot append %d samples to stream %q", n, dataset)
	}
	if n == 0 {
		return d.appended, nil
	}
	if d.sealed {
		return d.appended, errorf(ErrSealed, "stream %q is sealed at %d samples", dataset, d.appended)
	}
	bound := d.cfg.Size
	if bound == 0 {
		bound = math.MaxInt64
	}
	if n > bound-d.appended {
		return d.appended, errorf(ErrSealed, "stream %q holds %d of at most %d samples; %d more do not fit", dataset, d.appended, bound, n)
	}
	d.appended += n
	if d.appended == d.cfg.Size {
		d.sealed = true
	}
	return d.appended, nil
}

// Seal marks a Streaming dataset's stream as ended: its trailing partial
// shard becomes available, and the dataset finishes (Lease answers End)
// once every shard is completed or dropped. Sealing again is a no-op.
func (m *Machine) Seal(dataset string, now time.Time) error {
	m.expire(now)
	d, err := m.stream(dataset)
	if err != nil {
		return err
	}
	d.sealed = true
	d.settle()
	return nil
}

func (m *Machine) stream(dataset string) (*dataset, error) {
	d, err := m.lookup(dataset, Leased)
	if err != nil {
		return nil, err
	}
	if !d.cfg.Streaming {
		return nil, errorf(ErrWrongMode, "dataset %q is not Streaming", dataset)
	}
	return d, nil
}
