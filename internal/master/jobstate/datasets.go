package jobstate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roverml/rover/internal/shard"
)

// MaxDatasets bounds the datasets of one job.
const MaxDatasets = 256

// ShardEvent is the part of a journaled event that drives the datasets
// (its JSON is part of the journal format).
type ShardEvent struct {
	Dataset string         `json:"dataset"`
	Spec    *shard.Dataset `json:"spec,omitempty"`
	Worker  string         `json:"worker,omitempty"`
	// Incarnation is the worker's (0: the current round); Request
	// numbers a lease request (0: not deduplicated).
	Incarnation int64           `json:"incarnation,omitempty"`
	Request     uint64          `json:"request,omitempty"`
	Max         int             `json:"max,omitempty"`
	Results     []ShardResult   `json:"results,omitempty"`
	Position    *shard.Position `json:"position,omitempty"`
	Restore     bool            `json:"restore,omitempty"`
	Samples     int64           `json:"samples,omitempty"`
	Seal        bool            `json:"seal,omitempty"`
	State       []byte          `json:"state,omitempty"`
}

// ShardResult is a worker's result for one leased shard.
type ShardResult struct {
	ID uint64 `json:"id"`
	OK bool   `json:"ok"`
}

// BatchKind is the kind of one op of a batch: a lease or a completion (the
// journal's event types of the single calls).
type BatchKind string

const (
	BatchLease    BatchKind = "lease"
	BatchComplete BatchKind = "complete_shards"
)

// BatchOp is one shard event of a batch; it takes the batch's time.
type BatchOp struct {
	Type  BatchKind   `json:"type"`
	Shard *ShardEvent `json:"shard"`
}

// ShardOutcome is what a dataset event answers its caller.
type ShardOutcome struct {
	Lease   shard.LeaseResult
	Unknown []uint64 // completed leases the worker does not hold
	End     int64    // a stream's end after an append
}

// Datasets is the job's datasets (the shard machine) and the workers that
// leased shards since their last restart.
type Datasets struct {
	m       *shard.Machine
	holders map[string]struct{}
}

// NewDatasets returns the datasets of a job that registered none.
func NewDatasets() *Datasets {
	return &Datasets{m: shard.New(), holders: map[string]struct{}{}}
}

// RestoreDatasets returns the datasets MarshalState and Holders described.
func RestoreDatasets(state []byte, holders []string) (*Datasets, error) {
	m, err := shard.Restore(state)
	if err != nil {
		return nil, err
	}
	d := &Datasets{m: m, holders: map[string]struct{}{}}
	for _, w := range holders {
		d.holders[w] = struct{}{}
	}
	return d, nil
}

// Register applies a dataset's registration (ErrLimit past MaxDatasets).
func (d *Datasets) Register(spec shard.Dataset, now time.Time) error {
	if n := len(d.m.Datasets()); n >= MaxDatasets && !slices.Contains(d.m.Datasets(), spec.Name) {
		return fmt.Errorf("%w: the job has %d datasets, the most it may have (refusing %q)", ErrLimit, n, spec.Name)
	}
	return d.m.Register(spec, now)
}

// Lease applies a lease request of worker w.
func (d *Datasets) Lease(s *ShardEvent, w shard.Worker, now time.Time) (ShardOutcome, error) {
	res, err := d.m.Lease(s.Dataset, shard.LeaseRequest{Worker: w, Max: s.Max, ID: s.Request}, now)
	if err == nil {
		d.holders[s.Worker] = struct{}{}
	}
	return ShardOutcome{Lease: res}, err
}

// Complete applies worker w's results. Results for leases w does not hold
// are answered as unknown; a superseded worker's are all refused.
func (d *Datasets) Complete(s *ShardEvent, w shard.Worker, now time.Time) (ShardOutcome, error) {
	var out ShardOutcome
	var errs []error
	for _, r := range s.Results {
		var err error
		if r.OK {
			err = d.m.Complete(s.Dataset, r.ID, w, now)
		} else {
			err = d.m.Fail(s.Dataset, r.ID, w, now)
		}
		switch {
		case errors.Is(err, shard.ErrUnknownLease), errors.Is(err, shard.ErrNotHolder):
			out.Unknown = append(out.Unknown, r.ID)
		case errors.Is(err, shard.ErrSuperseded):
			return out, err // the same for every result
		case err != nil:
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// Advance applies a sync-mode position: advanced to, or restored.
func (d *Datasets) Advance(s *ShardEvent, now time.Time) error {
	if s.Restore {
		return d.m.RestorePosition(s.Dataset, *s.Position, now)
	}
	return d.m.Advance(s.Dataset, s.Position.Epoch, s.Position.Consumed, now)
}

// Append applies samples appended to a stream, sealing it if asked.
func (d *Datasets) Append(s *ShardEvent, now time.Time) (ShardOutcome, error) {
	end, err := d.m.Append(s.Dataset, s.Samples, now)
	if err == nil && s.Seal {
		err = d.m.Seal(s.Dataset, now)
	}
	return ShardOutcome{End: end}, err
}

// RestoreDataset applies a dataset state a client restores.
func (d *Datasets) RestoreDataset(s *ShardEvent, now time.Time) error {
	return d.m.RestoreDataset(s.Dataset, s.State, now)
}

// Tick expires the leases whose time has come.
func (d *Datasets) Tick(now time.Time) { d.m.Tick(now) }

// Batch applies the ops of a batch in order, each lease or completion as
// worker(op) names its worker, and returns each op's outcome and error.
// The shuffled samples a batch hands out are bounded as one call's are
// (shard.MaxLeaseSamples): once its leases carry that many, its later
// lease ops are answered Wait, unapplied, and lease again. Without the
// bound, one batch of many leases of the largest shuffled shards would
// make the master compute and send 2^29 sample indices.
func (d *Datasets) Batch(ops []BatchOp, worker func(*ShardEvent) shard.Worker, now time.Time) ([]ShardOutcome, []error) {
	outs := make([]ShardOutcome, len(ops))
	errs := make([]error, len(ops))
	var samples int
	for i, op := range ops {
		switch {
		case (op.Type != BatchLease && op.Type != BatchComplete) || op.Shard == nil:
			errs[i] = fmt.Errorf("%w: a batch holds lease and complete events, not %q", ErrInvalid, op.Type)
			continue
		case op.Type == BatchLease && samples >= shard.MaxLeaseSamples:
			outs[i] = ShardOutcome{Lease: shard.LeaseResult{Wait: true}}
			continue
		case op.Type == BatchLease:
			outs[i], errs[i] = d.Lease(op.Shard, worker(op.Shard), now)
		default:
			outs[i], errs[i] = d.Complete(op.Shard, worker(op.Shard), now)
		}
		for _, l := range outs[i].Lease.Shards {
			samples += len(l.Shard.Samples)
		}
	}
	return outs, errs
}

// Fence fences the datasets at a new round: every worker process restarts
// with the round as its incarnation, so the leases of every earlier one
// return to their queues, and whatever such a process still sends (a late
// request, a zombie on a node declared lost) is refused.
func (d *Datasets) Fence(round int64, now time.Time) {
	d.m.Fence(round, now)
	clear(d.holders)
}

// NodeLost returns the leases of the workers of node to their queues:
// their processes are gone. (The round that opens when a member node is
// lost fences them.) Workers are taken in name order, so that a replay of
// the journal requeues in the same order.
func (d *Datasets) NodeLost(node string, now time.Time) {
	var lost []string
	for w := range d.holders {
		if strings.HasPrefix(w, node+"/") {
			lost = append(lost, w)
		}
	}
	slices.Sort(lost)
	for _, w := range lost {
		d.m.WorkerLost(w, now)
		delete(d.holders, w)
	}
}

// Machine is the shard machine, for its read-only views (Status,
// Position, DatasetState, Datasets, NextDeadline, CheckOldOrders) and its
// MarshalState; events go through the methods above.
func (d *Datasets) Machine() *shard.Machine { return d.m }

// Holders is the workers that leased shards since their last restart, in
// name order.
func (d *Datasets) Holders() []string {
	out := make([]string, 0, len(d.holders))
	for w := range d.holders {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}
