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

// SchemaVersion is the "schema" of the JSON written by
// [Machine.MarshalState]. Schema 2 added the workers' incarnations, the
// fence and the last lease requests; schema 3 changed nothing in the JSON
// but the shuffled orders it refers to ([EpochOrder]). [Restore] still
// reads schema 1 (its workers are incarnation 0) and 2, unless a shuffled
// dataset is part-way through an epoch in them (see [Machine.CheckOldOrders]).
const SchemaVersion = 3

// CheckpointSchemaVersion is the "schema" of the JSON written by
// [Machine.DatasetState], which holds no workers. Schema 2 changed the
// shuffled orders only; [Machine.RestoreDataset] reads schema 1 unless its
// shuffled dataset is part-way through an epoch.
const CheckpointSchemaVersion = 2

type stateJSON struct {
	Schema   int           `json:"schema"`
	Fence    int64         `json:"fence,omitempty"`
	Workers  []workerJSON  `json:"workers,omitempty"`
	Datasets []datasetJSON `json:"datasets"`
}

type workerJSON struct {
	Name        string `json:"name"`
	Incarnation int64  `json:"incarnation,omitempty"`
	// Requests are the last lease request of each client, least recently
	// used first.
	Requests []requestJSON `json:"requests,omitempty"`
}

type requestJSON struct {
	Dataset string   `json:"dataset"`
	ID      uint64   `json:"id"`
	Leases  []uint64 `json:"leases,omitempty"`
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
	s := stateJSON{Schema: SchemaVersion, Fence: m.fence, Datasets: []datasetJSON{}}
	names := make([]string, 0, len(m.workers))
	for name := range m.workers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		w := m.workers[name]
		wj := workerJSON{Name: name, Incarnation: w.inc}
		for _, q := range w.reqs {
			wj.Requests = append(wj.Requests, requestJSON{Dataset: q.dataset, ID: q.id, Leases: slices.Clone(q.leases)})
		}
		s.Workers = append(s.Workers, wj)
	}
	for _, name := range m.Datasets() {
		d := m.datasets[name]
		dj := datasetJSON{Dataset: toConfigJSON(d.cfg), progressJSON: d.progress(false)}
		if d.cfg.Mode == Leased {
			dj.NextID = d.nextID
			for _, l := range d.heldLeases() {
				lj := leaseJSON{ID: l.id, Worker: l.w.name, Start: l.start, End: l.end, Retries: l.retries}
				if !l.Deadline().IsZero() {
					dl := l.Deadline()
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
// fields, trailing data and a schema not in accept.
func decodeStrict(data []byte, v any, schema *int, accept ...int) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("data after the state object")
	}
	if !slices.Contains(accept, *schema) {
		return bad("schema %d, this build reads only schema %v; restore with the matching Rover version", *schema, accept)
	}
	return nil
}

// Restore rebuilds a machine from [Machine.MarshalState]'s output (schema 1
// to 3). It rejects an unknown schema, any state the machine could not have
// reached, and state of schema 1 or 2 with a shuffled dataset part-way
// through an epoch (whose order has changed since), with an error wrapping
// [ErrBadState].
func Restore(data []byte) (*Machine, error) {
	var s stateJSON
	if err := decodeStrict(data, &s, &s.Schema, 1, 2, SchemaVersion); err != nil {
		return nil, err
	}
	m := New()
	if s.Fence < 0 {
		return nil, bad("fence %d is negative", s.Fence)
	}
	m.fence = s.Fence
	for i, wj := range s.Workers {
		switch {
		case validName("worker", wj.Name) != nil:
			return nil, bad("worker name %q", wj.Name)
		case i > 0 && s.Workers[i-1].Name >= wj.Name:
			return nil, bad("workers not sorted by unique name at %q", wj.Name)
		case wj.Incarnation < m.fence:
			return nil, bad("worker %q has incarnation %d, below the fence %d", wj.Name, wj.Incarnation, m.fence)
		}
		m.workers[wj.Name] = &worker{name: wj.Name, inc: wj.Incarnation}
	}
	for i, dj := range s.Datasets {
		d, err := m.restoreDataset(dj, s.Schema)
		if err != nil {
			return nil, fmt.Errorf("dataset %d (%q): %w", i, dj.Dataset.Name, err)
		}
		if i > 0 && strings.Compare(s.Datasets[i-1].Dataset.Name, d.cfg.Name) >= 0 {
			return nil, bad("datasets not sorted by unique name at %q", d.cfg.Name)
		}
		m.datasets[d.cfg.Name] = d
	}
	for _, wj := range s.Workers {
		if err := m.restoreRequests(m.workers[wj.Name], wj.Requests); err != nil {
			return nil, fmt.Errorf("worker %q: %w", wj.Name, err)
		}
	}
	if s.Schema < 3 {
		if err := m.CheckOldOrders(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// restoreRequests checks and sets w's last lease requests.
func (m *Machine) restoreRequests(w *worker, rs []requestJSON) error {
	if len(rs) > MaxClients {
		return bad("%d requests remembered, at most %d", len(rs), MaxClients)
	}
	for _, rj := range rs {
		d := m.datasets[rj.Dataset]
		switch {
		case d == nil || d.cfg.Mode != Leased:
			return bad("request %d for %q, which is not a Leased dataset", rj.ID, rj.Dataset)
		case rj.ID == 0:
			return bad("request ID 0 for %q", rj.Dataset)
		case w.find(rj.Dataset, rj.ID) >= 0:
			return bad("two requests of client %d for %q", rj.ID>>32, rj.Dataset)
		case len(rj.Leases) > MaxLeaseShards:
			return bad("request %d answered with %d leases, at most %d", rj.ID, len(rj.Leases), MaxLeaseShards)
		}
		for i, id := range rj.Leases {
			if id < 1 || id >= d.nextID || i > 0 && id <= rj.Leases[i-1] {
				return bad("request %d has lease IDs %v, not ascending in 1..%d", rj.ID, rj.Leases, d.nextID-1)
			}
		}
		w.reqs = append(w.reqs, &request{dataset: rj.Dataset, id: rj.ID, leases: rj.Leases})
	}
	return nil
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

// restoreDataset rebuilds one dataset of a state of the given schema; its
// leases' workers are in m.workers (for schema 1, they are added at
// incarnation 0).
func (m *Machine) restoreDataset(dj datasetJSON, schema int) (*dataset, error) {
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
		w := m.workers[lj.Worker]
		if w == nil && schema == 1 {
			w = &worker{name: lj.Worker}
			m.workers[lj.Worker] = w
		}
		if w == nil {
			return nil, bad("lease %d is held by worker %q, who is not listed", lj.ID, lj.Worker)
		}
		var at time.Time // checked above: set when the dataset has a LeaseTimeout
		if lj.Deadline != nil {
			at = *lj.Deadline
		}
		m.insert(&lease{task: held[i], id: lj.ID, d: d, w: w}, at)
	}
	return d, nil
}
