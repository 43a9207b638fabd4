package shard

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/roverml/rover/internal/deadline"
)

// Machine is the sharding state machine of one job: every registered
// dataset, its queue, leases, positions and history. It is not safe for
// concurrent use; the master's driver serialises calls.
type Machine struct {
	datasets map[string]*dataset
	expiring deadline.Queue[*lease] // leases that can expire, by deadline
	workers  map[string]*worker     // by name: incarnation, leases, last requests
	fence    int64                  // incarnations below it are refused
	free     *lease                 // recycled lease records (linked by wnext)
}

// New returns a machine with no datasets.
func New() *Machine {
	return &Machine{datasets: make(map[string]*dataset), workers: make(map[string]*worker)}
}

// Lease is a shard handed to a worker.
type Lease struct {
	ID    uint64 // unique within the dataset; 0 is never used
	Shard Shard
	// Retries is how many times the shard failed (or its lease expired)
	// before this lease.
	Retries int
	// Deadline is when the lease expires unless completed or renewed; zero
	// when the dataset has no LeaseTimeout.
	Deadline time.Time
}

// LeaseResult is the answer to [Machine.Lease]. At most one of these holds:
// Shards is non-empty, Wait, End.
type LeaseResult struct {
	Shards []Lease
	// Wait: nothing to hand out now. Other workers hold the last shards of
	// the epoch (the next epoch starts only when they are completed, or
	// requeued and then completed), or a stream has no full shard yet. Ask
	// again later.
	Wait bool
	// End: the dataset is finished; there will be no more shards.
	End bool
}

// lookup returns the dataset called name, checking its mode.
func (m *Machine) lookup(name string, mode Mode) (*dataset, error) {
	d := m.datasets[name]
	if d == nil {
		return nil, errorf(ErrUnknownDataset, "no dataset %q is registered", name)
	}
	if d.cfg.Mode != mode {
		return nil, errorf(ErrWrongMode, "dataset %q is in %v mode; this call needs %v", name, d.cfg.Mode, mode)
	}
	return d, nil
}

// Register adds a dataset. The first registration of a name wins: an
// identical one (after defaults, ignoring fields the mode does not use) is a
// no-op, any other is ErrConflict naming the fields that differ.
func (m *Machine) Register(ds Dataset, now time.Time) error {
	m.expire(now)
	if err := ds.Validate(); err != nil {
		return err
	}
	ds = ds.normalized()
	if d := m.datasets[ds.Name]; d != nil {
		if s := diff(d.cfg, ds, false); s != "" {
			return errorf(ErrConflict, "dataset %q is registered with %s", ds.Name, s)
		}
		return nil
	}
	d := newDataset(ds)
	if ds.Mode == Sync {
		d.doing = nil
	}
	m.datasets[ds.Name] = d
	return nil
}

// MaxLeaseShards caps the shards one [Machine.Lease] call hands out.
const MaxLeaseShards = 1024

// LeaseRequest is a worker's request for shards.
type LeaseRequest struct {
	Worker Worker
	// Max is the most shards to hand out, >= 1 (capped at MaxLeaseShards).
	Max int
	// ID numbers the request so that a retry is answered instead of
	// served again; 0 turns that off. Its high 32 bits name the client
	// that sent it (one process or goroutine of the worker, counting its
	// own requests), its low 32 bits count that client's requests. See
	// [Machine.Lease].
	ID uint64
}

// Lease hands r.Worker up to r.Max shards of a Leased dataset from the
// front of its queue: requeued shards first (the latest requeued at the
// very front; of leases requeued together, the lowest lease ID first), then
// new shards in epoch order. See [LeaseResult] for Wait and End. Each shard
// costs O(log leases held), plus O(1) a sample when shuffled (its samples
// are computed then, see [EpochOrder]), whatever the dataset's size; of a
// shuffled dataset one call hands out at most MaxLeaseSamples samples, and
// always at least one shard when any is queued.
//
// A request from a superseded incarnation of the worker is ErrSuperseded
// (see [Worker]); one from a newer incarnation first requeues the leases of
// the older ones.
//
// Deduplication: the machine remembers, for each client of the worker's
// incarnation and dataset, the last request ID and the leases it answered
// with. The same ID again (a retry whose answer was lost, or a duplicate
// delivery) is answered with those leases that the worker still holds, and
// never with new ones: Wait (End once the dataset is finished) when none
// are left. An ID below the client's last is ErrStaleRequest. The machine
// keeps the last request of at most [MaxClients] clients of each worker,
// forgetting the least recently used.
func (m *Machine) Lease(dataset string, r LeaseRequest, now time.Time) (LeaseResult, error) {
	m.expire(now)
	if err := m.check(r.Worker); err != nil {
		return LeaseResult{}, err
	}
	d, err := m.lookup(dataset, Leased)
	if err != nil {
		return LeaseResult{}, err
	}
	if r.Max < 1 {
		return LeaseResult{}, errorf(ErrInvalidRequest, "max is %d; ask for at least 1 shard", r.Max)
	}
	w := m.admit(r.Worker)
	q, err := w.request(dataset, r.ID)
	if err != nil {
		return LeaseResult{}, err
	}
	if q != nil && q.id == r.ID {
		return m.repeat(d, w, q), nil
	}
	res := m.grant(d, w, r.Max, now)
	if r.ID != 0 {
		w.remember(q, dataset, r.ID, res.Shards)
	}
	return res, nil
}

// grant leases up to max shards of d to w.
func (m *Machine) grant(d *dataset, w *worker, max int, now time.Time) LeaseResult {
	if d.finished {
		return LeaseResult{End: true}
	}
	n := min(int64(max), MaxLeaseShards, d.todo())
	if n == 0 {
		return LeaseResult{Wait: true}
	}
	res := LeaseResult{Shards: make([]Lease, 0, n)}
	var samples int64 // of a shuffled dataset, computed for this call
	for range n {
		if d.cfg.Shuffle {
			k := d.frontLen()
			if samples > 0 && samples+k > MaxLeaseSamples {
				break
			}
			samples += k
		}
		t, _ := d.pop()
		l := m.hold(d, w, t, now)
		res.Shards = append(res.Shards, Lease{ID: l.id, Shard: d.shard(t), Retries: t.retries, Deadline: l.Deadline()})
	}
	return res
}

// repeat answers request q of w again: with the leases it got that w
// still holds, else Wait or End.
func (m *Machine) repeat(d *dataset, w *worker, q *request) LeaseResult {
	var res LeaseResult
	for _, id := range q.leases {
		if l := d.doing[id]; l != nil && l.w == w {
			res.Shards = append(res.Shards, Lease{ID: id, Shard: d.shard(l.task), Retries: l.retries, Deadline: l.Deadline()})
		}
	}
	if len(res.Shards) == 0 {
		res.End, res.Wait = d.finished, !d.finished
	}
	return res
}

// hold records a new lease of t by w.
func (m *Machine) hold(d *dataset, w *worker, t task, now time.Time) *lease {
	l := m.free
	if l != nil {
		m.free = l.wnext
	} else {
		l = new(lease)
	}
	*l = lease{task: t, id: d.nextID, d: d, w: w}
	d.nextID++
	m.insert(l, now.Add(d.cfg.LeaseTimeout))
	return l
}

// insert adds l to its dataset's held leases, the deadline queue with
// deadline at (when its dataset has a LeaseTimeout) and its worker's list.
func (m *Machine) insert(l *lease, at time.Time) {
	d := l.d
	d.doing[l.id] = l
	d.doingSamples += l.end - l.start
	if d.cfg.LeaseTimeout > 0 {
		m.expiring.Set(l, at)
	}
	m.link(l)
}

func (m *Machine) link(l *lease) {
	if h := l.w.leases; h != nil {
		h.wprev, l.wnext = l, h
	}
	l.w.leases = l
}

// release forgets l: it is no longer held (completed or requeued).
func (m *Machine) release(l *lease) {
	d := l.d
	delete(d.doing, l.id)
	d.doingSamples -= l.end - l.start
	m.expiring.Remove(l)
	if l.wprev != nil {
		l.wprev.wnext = l.wnext
	} else {
		l.w.leases = l.wnext
	}
	if l.wnext != nil {
		l.wnext.wprev = l.wprev
	}
	*l = lease{wnext: m.free}
	m.free = l
}

// held returns the lease id of a Leased dataset held by w, after checking
// and admitting w.
func (m *Machine) held(dataset string, id uint64, wk Worker, now time.Time) (*dataset, *lease, error) {
	m.expire(now)
	if err := m.check(wk); err != nil {
		return nil, nil, err
	}
	d, err := m.lookup(dataset, Leased)
	if err != nil {
		return nil, nil, err
	}
	w := m.admit(wk)
	l := d.doing[id]
	if l == nil {
		return d, nil, errorf(ErrUnknownLease, "dataset %q has no lease %d held (it expired, failed or was requeued): discard its result", dataset, id)
	}
	if l.w != w {
		return d, nil, errorf(ErrNotHolder, "lease %d of dataset %q is held by %q, not %q", id, dataset, l.w.name, w.name)
	}
	return d, l, nil
}

// Complete records that worker finished lease id. Completing a lease that
// was already completed returns nil again (the first completion counted; the
// machine remembers completed IDs, not who completed them, so a repeat is
// not checked against the worker). A lease that expired, failed or was
// requeued is ErrUnknownLease: the caller must discard its result. A
// superseded worker is ErrSuperseded, whatever the lease.
func (m *Machine) Complete(dataset string, id uint64, worker Worker, now time.Time) error {
	d, l, err := m.held(dataset, id, worker, now)
	if l == nil {
		if d != nil && d.completed.has(id) {
			return nil
		}
		return err
	}
	d.done++
	d.doneSamples += l.end - l.start
	d.completed.add(id)
	m.release(l)
	d.settle()
	return nil
}

// Fail records that worker could not process lease id: the shard goes back
// to the front of the queue with one more failure, or, once it has failed
// MaxRetries times, is dropped and listed in [Status].Dropped.
func (m *Machine) Fail(dataset string, id uint64, worker Worker, now time.Time) error {
	d, l, err := m.held(dataset, id, worker, now)
	if l == nil {
		return err
	}
	m.requeue(d, []*lease{l}, true)
	d.settle()
	return nil
}

// Renew extends lease id by the dataset's LeaseTimeout from now (a no-op
// without one).
func (m *Machine) Renew(dataset string, id uint64, worker Worker, now time.Time) error {
	_, l, err := m.held(dataset, id, worker, now)
	if l == nil {
		return err
	}
	if l.Queued() {
		m.expiring.Set(l, now.Add(l.d.cfg.LeaseTimeout))
	}
	return nil
}

// WorkerLost requeues every lease the worker called name holds (whatever
// its incarnation), in every dataset, to the front of its queue (lowest
// lease ID first), without counting a failure: the worker died, not the
// shard. Unknown workers are ignored. The worker's incarnation may still
// make requests; [Machine.Fence] refuses them too.
func (m *Machine) WorkerLost(name string, now time.Time) {
	m.expire(now)
	if w := m.workers[name]; w != nil {
		m.requeueAll(w.held(), false)
	}
}

// Tick requeues the leases whose deadline is at or before now to the front
// of their queues. An expiry counts as a failure of the shard (unlike
// WorkerLost): a worker that is alive but never finishes a shard in time
// would otherwise get it back forever, so a shard that keeps hanging or
// crashing its workers is dropped after MaxRetries. Every event applies
// Tick first.
func (m *Machine) Tick(now time.Time) { m.expire(now) }

func (m *Machine) expire(now time.Time) {
	l, ok := m.expiring.PopDue(now)
	if !ok {
		return
	}
	var ls []*lease
	for ; ok; l, ok = m.expiring.PopDue(now) {
		ls = append(ls, l)
	}
	m.requeueAll(ls, true)
}

// NextDeadline returns the earliest lease deadline, when [Machine.Tick]
// next matters; false when no lease can expire.
func (m *Machine) NextDeadline() (time.Time, bool) {
	return m.expiring.Next()
}

// requeueAll requeues leases of any datasets, grouped by dataset.
func (m *Machine) requeueAll(ls []*lease, failed bool) {
	slices.SortFunc(ls, func(a, b *lease) int {
		if a.d != b.d {
			return strings.Compare(a.d.cfg.Name, b.d.cfg.Name)
		}
		return cmp.Compare(a.id, b.id)
	})
	for i := 0; i < len(ls); {
		j := i + 1
		for j < len(ls) && ls[j].d == ls[i].d {
			j++
		}
		d := ls[i].d
		m.requeue(d, ls[i:j], failed)
		d.settle()
		i = j
	}
}

// requeue puts leases of d, sorted by ID, back at the front of its queue so
// that the lowest ID is taken first; failed counts a failure against each
// shard, dropping those that reach MaxRetries.
func (m *Machine) requeue(d *dataset, ls []*lease, failed bool) {
	for i := len(ls) - 1; i >= 0; i-- {
		l := ls[i]
		t := l.task
		m.release(l)
		if failed {
			t.retries++
			if t.retries >= d.cfg.MaxRetries {
				d.drop(t)
				continue
			}
		}
		d.pushFront(t)
	}
}
