package shard

import (
	"fmt"
	"slices"
	"time"
)

// Worker identifies one process of a worker: the name the master knows it
// by and its incarnation, the rendezvous round the process was started in.
// A worker's later processes have higher incarnations. A request from an
// incarnation older than the newest one the machine has seen for the name,
// or below the job's fence ([Machine.Fence]), is refused with
// ErrSuperseded; the first request of a newer incarnation returns the
// leases of the older ones to their queues, without counting a failure.
type Worker struct {
	Name        string
	Incarnation int64
}

func (w Worker) String() string { return fmt.Sprintf("%q incarnation %d", w.Name, w.Incarnation) }

// MaxClients bounds the clients of one worker whose last lease request the
// machine remembers (see [Machine.Lease]).
const MaxClients = 64

// worker is what the machine keeps about one worker name.
type worker struct {
	name   string
	inc    int64  // the newest incarnation seen; older ones are superseded
	leases *lease // its leases, a doubly linked list (all of incarnation inc)
	// reqs holds the last lease request of each of its clients (one per
	// dataset and client), least recently used first; at most MaxClients.
	reqs []*request
}

// request is the last lease request of one client of a worker incarnation.
type request struct {
	dataset string
	id      uint64   // the client is id>>32
	leases  []uint64 // the lease IDs it was answered with, ascending
}

// held returns w's leases.
func (w *worker) held() []*lease {
	var ls []*lease
	for l := w.leases; l != nil; l = l.wnext {
		ls = append(ls, l)
	}
	return ls
}

// check refuses a request of wk that is malformed or comes from a
// superseded incarnation; it changes nothing.
func (m *Machine) check(wk Worker) error {
	if err := validName("worker", wk.Name); err != nil {
		return err
	}
	if wk.Incarnation < 0 {
		return errorf(ErrInvalidRequest, "worker %q has incarnation %d; incarnations are rounds, from 0", wk.Name, wk.Incarnation)
	}
	if wk.Incarnation < m.fence {
		return errorf(ErrSuperseded, "worker %v is from a round before %d, when every worker restarted: this process belongs to an earlier round and must stop", wk, m.fence)
	}
	if w := m.workers[wk.Name]; w != nil && wk.Incarnation < w.inc {
		return errorf(ErrSuperseded, "worker %v has been replaced by incarnation %d: this process belongs to an earlier round and must stop", wk, w.inc)
	}
	return nil
}

// admit returns the record of a worker that passed check, creating it, or
// moving it to a newer incarnation: the older one's leases are requeued
// without a failure and its requests forgotten.
func (m *Machine) admit(wk Worker) *worker {
	w := m.workers[wk.Name]
	if w == nil {
		w = &worker{name: wk.Name, inc: wk.Incarnation}
		m.workers[wk.Name] = w
		return w
	}
	if wk.Incarnation > w.inc {
		m.requeueAll(w.held(), false)
		w.inc, w.reqs = wk.Incarnation, nil
	}
	return w
}

// request returns the last request of the client of id for dataset (nil
// when there is none, or id is 0), or ErrStaleRequest when id is below it.
func (w *worker) request(dataset string, id uint64) (*request, error) {
	if id == 0 {
		return nil, nil
	}
	i := w.find(dataset, id)
	if i < 0 {
		return nil, nil
	}
	q := w.reqs[i]
	if id < q.id {
		return nil, errorf(ErrStaleRequest, "request %d of client %d of worker %q (incarnation %d) for dataset %q comes after its request %d: a late retry or duplicate, whose answer nobody waits for",
			uint32(id), id>>32, w.name, w.inc, dataset, uint32(q.id))
	}
	w.use(i)
	return q, nil
}

// find returns the index in w.reqs of the request of id's client for
// dataset, or -1.
func (w *worker) find(dataset string, id uint64) int {
	return slices.IndexFunc(w.reqs, func(q *request) bool { return q.dataset == dataset && q.id>>32 == id>>32 })
}

// use moves w.reqs[i] to the back: the most recently used.
func (w *worker) use(i int) {
	q := w.reqs[i]
	copy(w.reqs[i:], w.reqs[i+1:])
	w.reqs[len(w.reqs)-1] = q
}

// remember records request id for dataset, answered with ls, as its
// client's last (q is the client's previous one, or nil).
func (w *worker) remember(q *request, dataset string, id uint64, ls []Lease) {
	if q == nil {
		if len(w.reqs) == MaxClients {
			w.reqs = slices.Delete(w.reqs, 0, 1)
		}
		q = &request{dataset: dataset}
		w.reqs = append(w.reqs, q)
	}
	q.id, q.leases = id, q.leases[:0]
	for _, l := range ls {
		q.leases = append(q.leases, l.ID)
	}
}

// Fence refuses, from now on, every request of a worker incarnation below
// min (ErrSuperseded), and returns the leases such incarnations hold to the
// front of their queues (lowest lease ID first) without counting a
// failure. The master fences at each new rendezvous round, since every
// worker process then restarts with the new round as its incarnation: a
// late request from a process of an earlier round, or from one that lives
// on after its node was declared lost, can take no shard. A fence never
// moves back; a lower min is a no-op.
func (m *Machine) Fence(min int64, now time.Time) {
	m.expire(now)
	if min <= m.fence {
		return
	}
	m.fence = min
	var ls []*lease
	for name, w := range m.workers {
		if w.inc < min {
			ls = append(ls, w.held()...)
			delete(m.workers, name)
		}
	}
	m.requeueAll(ls, false)
}

// MinIncarnation returns the fence: requests of incarnations below it are
// refused.
func (m *Machine) MinIncarnation() int64 { return m.fence }
