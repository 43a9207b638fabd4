package shard

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// SchemaVersion is the "schema" of the JSON written by [Machine.MarshalState]
// and [Machine.DatasetState].
const SchemaVersion = 1

type stateJSON struct {
	Schema   int           `json:"schema"`
	Datasets []datasetJSON `json:"datasets"`
}

type configJSON struct {
	Name         string `json:"name"`
	Size         int64  `json:"size"`
	BatchSize    int    `json:"batch_size"`
	ShardSize    int64  `json:"shard_size"`
	Epochs       int    `json:"epochs"`
	Shuffle      bool   `json:"shuffle"`
	Seed         uint64 `json:"seed"`
	Mode         string `json:"mode"`
	Streaming    bool   `json:"streaming"`
	LeaseTimeout string `json:"lease_timeout"`
	MaxRetries   int    `json:"max_retries"`
}

// progressJSON is a dataset's progress: everything but its leases.
type progressJSON struct {
	Epoch    int  `json:"epoch"`
	Finished bool `json:"finished,omitempty"`
	// Todo is the queue of requeued shards, front first; the positions
	// [Cursor, end) follow it.
	Todo                []taskJSON  `json:"todo,omitempty"`
	Cursor              int64       `json:"cursor,omitempty"`
	Done                int64       `json:"done,omitempty"`
	DoneSamples         int64       `json:"done_samples,omitempty"`
	EpochDropped        int64       `json:"epoch_dropped,omitempty"`
	EpochDroppedSamples int64       `json:"epoch_dropped_samples,omitempty"`
	Dropped             []shardJSON `json:"dropped,omitempty"`
	Appended            int64       `json:"appended,omitempty"`
	Sealed              bool        `json:"sealed,omitempty"`
	Position            *Position   `json:"position,omitempty"`
}

type taskJSON struct {
	Start   int64 `json:"start"`
	End     int64 `json:"end"`
	Retries int   `json:"retries,omitempty"`
}

type shardJSON struct {
	Epoch int   `json:"epoch"`
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

type leaseJSON struct {
	ID       uint64     `json:"id"`
	Worker   string     `json:"worker"`
	Start    int64      `json:"start"`
	End      int64      `json:"end"`
	Retries  int        `json:"retries,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

type datasetJSON struct {
	Dataset configJSON `json:"dataset"`
	progressJSON
	Doing     []leaseJSON `json:"doing,omitempty"`
	NextID    uint64      `json:"next_id,omitempty"`
	Completed [][2]uint64 `json:"completed,omitempty"` // [lo, hi) ranges of completed lease IDs
}

func toConfigJSON(d Dataset) configJSON {
	return configJSON{
		Name: d.Name, Size: d.Size, BatchSize: d.BatchSize, ShardSize: d.ShardSize, Epochs: d.Epochs,
		Shuffle: d.Shuffle, Seed: d.Seed, Mode: d.Mode.String(), Streaming: d.Streaming,
		LeaseTimeout: d.LeaseTimeout.String(), MaxRetries: d.MaxRetries,
	}
}

func toTaskJSON(t task) taskJSON { return taskJSON{Start: t.start, End: t.end, Retries: t.retries} }

// heldLeases returns d's leases by ID.
func (d *dataset) heldLeases() []*lease {
	ls := make([]*lease, 0, len(d.doing))
	for _, l := range d.doing {
		ls = append(ls, l)
	}
	slices.SortFunc(ls, func(a, b *lease) int { return cmp.Compare(a.id, b.id) })
	return ls
}

// progress encodes d's progress; with flatten, its held leases (by ID) come
// first in Todo, as if they had been requeued.
func (d *dataset) progress(flatten bool) progressJSON {
	p := progressJSON{Epoch: d.epoch, Finished: d.finished}
	if d.cfg.Mode == Sync {
		pos := d.pos
		p.Position = &pos
		return p
	}
	if flatten {
		for _, l := range d.heldLeases() {
			p.Todo = append(p.Todo, toTaskJSON(l.task))
		}
	}
	for i := len(d.retry) - 1; i >= 0; i-- {
		p.Todo = append(p.Todo, toTaskJSON(d.retry[i]))
	}
	p.Cursor, p.Done, p.DoneSamples = d.cursor, d.done, d.doneSamples
	p.EpochDropped, p.EpochDroppedSamples = d.dropN, d.dropSamples
	for _, s := range d.dropped {
		p.Dropped = append(p.Dropped, shardJSON{Epoch: s.Epoch, Start: s.Start, End: s.End})
	}
	p.Appended, p.Sealed = d.appended, d.sealed
	return p
}

// MarshalState encodes the whole machine as JSON for persistence: every
// dataset with its queue, held leases and deadlines, lease IDs, positions,
// retry counts and dropped shards. The encoding is deterministic; [Restore]
// reads it back. Its size is O(datasets + queued retries + leases held +
// failures), not O(shards).
func (m *Machine) MarshalState() ([]byte, error) {
	s := stateJSON{Schema: SchemaVersion, Datasets: []datasetJSON{}}
	for _, name := range m.Datasets() {
		d := m.datasets[name]
		dj := datasetJSON{Dataset: toConfigJSON(d.cfg), progressJSON: d.progress(false)}
		if d.cfg.Mode == Leased {
			dj.NextID = d.nextID
			for _, l := range d.heldLeases() {
				lj := leaseJSON{ID: l.id, Worker: l.worker, Start: l.start, End: l.end, Retries: l.retries}
				if !l.deadline.IsZero() {
					dl := l.deadline
					lj.Deadline = &dl
				}
				dj.Doing = append(dj.Doing, lj)
			}
			for _, r := range d.completed.r {
				dj.Completed = append(dj.Completed, [2]uint64{r.lo, r.hi})
			}
		}
		s.Datasets = append(s.Datasets, dj)
	}
	return json.Marshal(s)
}

func bad(format string, a ...any) error { return errorf(ErrBadState, format, a...) }

// decodeStrict decodes exactly one JSON object into v, rejecting unknown
// fields, trailing data and an unknown schema.
func decodeStrict(data []byte, v any, schema *int) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("data after the state object")
	}
	if *schema != SchemaVersion {
		return bad("schema %d, this build reads only schema %d; restore with the matching Rover version", *schema, SchemaVersion)
	}
	return nil
}

// Restore rebuilds a machine from [Machine.MarshalState]'s output. It rejects
// an unknown schema and any state the machine could not have reached, with
// an error wrapping [ErrBadState].
func Restore(data []byte) (*Machine, error) {
	var s stateJSON
	if err := decodeStrict(data, &s, &s.Schema); err != nil {
		return nil, err
	}
	m := New()
	for i, dj := range s.Datasets {
		d, err := m.restoreDataset(dj)
		if err != nil {
			return nil, fmt.Errorf("dataset %d (%q): %w", i, dj.Dataset.Name, err)
		}
		if i > 0 && strings.Compare(s.Datasets[i-1].Dataset.Name, d.cfg.Name) >= 0 {
			return nil, bad("datasets not sorted by unique name at %q", d.cfg.Name)
		}
		m.datasets[d.cfg.Name] = d
	}
	return m, nil
}

func (c configJSON) config() (Dataset, error) {
	lt, err := time.ParseDuration(c.LeaseTimeout)
	if err != nil {
		return Dataset{}, bad("lease_timeout: %v", err)
	}
	ds := Dataset{
		Name: c.Name, Size: c.Size, BatchSize: c.BatchSize, ShardSize: c.ShardSize, Epochs: c.Epochs,
		Shuffle: c.Shuffle, Seed: c.Seed, Streaming: c.Streaming, LeaseTimeout: lt, MaxRetries: c.MaxRetries,
	}
	switch c.Mode {
	case "Leased":
		ds.Mode = Leased
	case "Sync":
		ds.Mode = Sync
	default:
		return Dataset{}, bad("mode %q; want Leased or Sync", c.Mode)
	}
	if err := ds.Validate(); err != nil {
		return Dataset{}, bad("%v", err)
	}
	return ds, nil
}

func (m *Machine) restoreDataset(dj datasetJSON) (*dataset, error) {
	cfg, err := dj.Dataset.config()
	if err != nil {
		return nil, err
	}
	if cfg != cfg.normalized() {
		return nil, bad("dataset settings are not normalized: %s", diff(cfg, cfg.normalized(), false))
	}
	var held []task
	for _, lj := range dj.Doing {
		held = append(held, task{start: lj.Start, end: lj.End, retries: lj.Retries})
	}
	d, err := loadProgress(cfg, dj.progressJSON, held, true)
	if err != nil {
		return nil, err
	}
	if cfg.Mode == Sync {
		if len(dj.Doing) > 0 || dj.NextID != 0 || len(dj.Completed) > 0 {
			return nil, bad("a Sync dataset has leases")
		}
		return d, nil
	}
	if dj.NextID < 1 {
		return nil, bad("next_id is %d; lease IDs start at 1", dj.NextID)
	}
	d.nextID = dj.NextID
	for i, r := range dj.Completed {
		if r[0] < 1 || r[0] >= r[1] || r[1] > d.nextID || i > 0 && r[0] <= dj.Completed[i-1][1] {
			return nil, bad("completed lease IDs %v are not sorted, disjoint ranges below next_id %d", dj.Completed, d.nextID)
		}
		d.completed.r = append(d.completed.r, idRange{r[0], r[1]})
	}
	for i, lj := range dj.Doing {
		switch {
		case lj.ID < 1 || lj.ID >= d.nextID || i > 0 && lj.ID <= dj.Doing[i-1].ID:
			return nil, bad("lease ID %d not sorted, unique and in 1..%d", lj.ID, d.nextID-1)
		case d.completed.has(lj.ID):
			return nil, bad("lease %d is both held and completed", lj.ID)
		case validName("worker", lj.Worker) != nil:
			return nil, bad("lease %d has worker name %q", lj.ID, lj.Worker)
		case (lj.Deadline == nil) != (cfg.LeaseTimeout == 0):
			return nil, bad("lease %d has deadline %v with LeaseTimeout %v", lj.ID, lj.Deadline, cfg.LeaseTimeout)
		}
		l := &lease{task: held[i], id: lj.ID, d: d, worker: lj.Worker, hidx: -1}
		if lj.Deadline != nil {
			l.deadline = *lj.Deadline
		}
		m.insert(l)
	}
	return d, nil
}
