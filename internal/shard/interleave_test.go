package shard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestInterleavings plays a job of leased-mode workers against the machine,
// as the master drives it, under random interleavings: workers on several
// nodes lease ahead (prefetch), complete and fail shards; they are killed
// between any two steps; requests and answers are lost, so workers send the
// same request again, and copies of requests arrive late, even after their
// process died and a newer round fenced it; rounds open (fencing every
// earlier worker) with nodes leaving and coming back, and the fence may
// reach the machine after the new round's first requests; zombie processes
// of earlier rounds keep asking until refused.
//
// After every step: every shard of an epoch is queued, held by a worker at
// or above the fence that is its name's newest incarnation, completed, or
// dropped, exactly one of these (checkInvariants); a shard held by a live
// process is one it knows of, or one granted to the request it is still
// sending; every answer is the one the model expects. At the end every
// epoch of every dataset completed each of its shards exactly once, and the
// datasets ended.
func TestInterleavings(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { newSim(t, seed).run(1200) })
	}
}

// A simulated job: nodes with two workers each.
var simNodes = []string{"a", "b", "c"}

const (
	simRanks    = 2
	simPrefetch = 3
)

// proc is one worker process.
type proc struct {
	w      Worker
	client uint64 // the high 32 bits of its request IDs
	seq    uint64
	alive  bool // acting: false once killed or stopped at a round change
	zombie bool // lives on past its round, until the machine refuses it
	ds     map[string]*procDS
}

// procDS is a process's view of one dataset.
type procDS struct {
	buf    []Lease // leases it got and has not reported
	lease  uint64  // the lease request it is sending until answered (0: none)
	max    int
	report *Lease // the lease it is reporting until answered
	ok     bool   // the report is a completion, not a failure
	ended  bool
}

// msg is a copy of a request that the network delivers late.
type msg struct {
	p      *proc
	ds     string
	kind   string // lease, complete, fail
	id     uint64 // lease: request ID; complete/fail: lease ID
	max    int
	answer bool // false: nobody waits for the answer
}

type sim struct {
	t      *testing.T
	r      *rand.Rand
	m      *Machine
	dss    []Dataset
	round  int64
	fenced int64 // the last fence applied
	fence  int64 // a fence not applied yet (0: none)
	procs  []*proc
	byW    map[Worker]*proc
	pool   []msg
	newest map[string]int64 // each name's newest incarnation the machine accepted
	// last is each process's highest lease request ID delivered, per
	// dataset; granted the leases each request got at its first delivery.
	last     map[*proc]map[string]uint64
	granted  map[*proc]map[uint64][]Lease
	leases   map[string]map[uint64]Lease // every lease handed out
	released map[string]map[uint64]bool  // leases completed or failed
	counted  map[string]map[uint64]bool  // leases whose completion counted
	covered  map[string]map[[2]int64]int // {epoch, position} -> completions
}

func newSim(t *testing.T, seed uint64) *sim {
	r := rand.New(rand.NewPCG(seed, 99))
	s := &sim{t: t, r: r, m: New(), byW: map[Worker]*proc{}, newest: map[string]int64{}, last: map[*proc]map[string]uint64{},
		granted: map[*proc]map[uint64][]Lease{}, leases: map[string]map[uint64]Lease{},
		released: map[string]map[uint64]bool{}, counted: map[string]map[uint64]bool{}, covered: map[string]map[[2]int64]int{}}
	s.dss = []Dataset{
		{Name: "d", Size: 20 + r.Int64N(100), BatchSize: 1, ShardSize: 1 + r.Int64N(8), Epochs: 1 + r.IntN(3), MaxRetries: 1000},
		{Name: "e", Size: 10 + r.Int64N(40), BatchSize: 1, ShardSize: 1 + r.Int64N(5), Epochs: 2, Shuffle: true, Seed: seed, MaxRetries: 1000},
	}
	for _, ds := range s.dss {
		if err := s.m.Register(ds, t0); err != nil {
			t.Fatal(err)
		}
		s.leases[ds.Name], s.released[ds.Name] = map[uint64]Lease{}, map[uint64]bool{}
		s.counted[ds.Name], s.covered[ds.Name] = map[uint64]bool{}, map[[2]int64]int{}
	}
	s.newRound(simNodes, true)
	return s
}

func (s *sim) run(steps int) {
	needRound := false
	for range steps {
		switch x := s.r.IntN(100); {
		case s.fence != 0 && x < 30:
			s.applyFence()
		case x < 70:
			s.act(s.pick(), false)
		case x < 85:
			s.deliverLate()
		case x < 88:
			if p := s.pick(); p != nil && !p.zombie {
				p.alive = false // SIGKILL: its buffer is gone; its leases stay held until the fence
				needRound = true
			}
		case x < 91 || needRound && x < 97:
			var nodes []string
			for _, n := range simNodes {
				if s.r.IntN(3) > 0 {
					nodes = append(nodes, n)
				}
			}
			if len(nodes) == 0 {
				nodes = simNodes[:1]
			}
			s.newRound(nodes, s.r.IntN(3) > 0)
			needRound = false
		}
		s.check()
	}
	s.drain()
}

// newRound opens the next round: every process stops (a few live on as
// zombies), the nodes' workers start anew, and the fence is applied now
// or a little later.
func (s *sim) newRound(nodes []string, fenceNow bool) {
	s.applyFence()
	s.round++
	for _, p := range s.procs {
		if p.alive && s.r.IntN(8) == 0 {
			p.zombie = true
		} else {
			p.alive = false
		}
	}
	for _, n := range nodes {
		for rank := range simRanks {
			p := &proc{w: Worker{Name: fmt.Sprintf("%s/%d", n, rank), Incarnation: s.round}, client: s.r.Uint64() >> 32 << 32, alive: true, ds: map[string]*procDS{}}
			for _, ds := range s.dss {
				p.ds[ds.Name] = &procDS{}
			}
			s.procs = append(s.procs, p)
			s.byW[p.w] = p
			s.last[p], s.granted[p] = map[string]uint64{}, map[uint64][]Lease{}
		}
	}
	s.fence = s.round
	if fenceNow {
		s.applyFence()
	}
}

func (s *sim) applyFence() {
	if s.fence == 0 {
		return
	}
	s.m.Fence(s.fence, t0)
	s.fenced, s.fence = s.fence, 0
}

// pick returns a random acting process, or nil.
func (s *sim) pick() *proc {
	var live []*proc
	for _, p := range s.procs {
		if p.alive || p.zombie {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[s.r.IntN(len(live))]
}

// act makes p's next call on a random dataset; reliable: no loss.
func (s *sim) act(p *proc, reliable bool) {
	if p == nil {
		return
	}
	ds := s.dss[s.r.IntN(len(s.dss))].Name
	v := p.ds[ds]
	var m msg
	switch {
	case v.lease != 0:
		m = msg{p: p, ds: ds, kind: "lease", id: v.lease, max: v.max}
	case v.report != nil:
		m = msg{p: p, ds: ds, kind: map[bool]string{true: "complete", false: "fail"}[v.ok], id: v.report.ID}
	case len(v.buf) < simPrefetch && !v.ended && (len(v.buf) == 0 || !reliable && s.r.IntN(2) == 0):
		p.seq++
		v.lease, v.max = p.client|p.seq, simPrefetch-len(v.buf)
		m = msg{p: p, ds: ds, kind: "lease", id: v.lease, max: v.max}
	case len(v.buf) > 0: // trains a shard it holds
		l := v.buf[0]
		v.report, v.ok, v.buf = &l, s.r.IntN(20) > 0, v.buf[1:]
		m = msg{p: p, ds: ds, kind: map[bool]string{true: "complete", false: "fail"}[v.ok], id: l.ID}
	default:
		return
	}
	m.answer = true
	if reliable {
		s.deliver(m)
		return
	}
	switch s.r.IntN(10) {
	case 0: // lost on the way: the process sends it again later
		return
	case 1: // delayed: it arrives some time later, when nobody waits for it
		m.answer = false
		s.pool = append(s.pool, m)
		return
	case 2: // the answer is lost: the process sends it again later
		m.answer = false
	case 3: // delivered twice
		dup := m
		dup.answer = false
		s.pool = append(s.pool, dup)
	}
	s.deliver(m)
}

func (s *sim) deliverLate() {
	if len(s.pool) == 0 {
		return
	}
	i := s.r.IntN(len(s.pool))
	m := s.pool[i]
	s.pool = slices.Delete(s.pool, i, i+1)
	s.deliver(m)
}

// deliver applies m to the machine, checks the answer, and hands it to its
// process when it waits for it.
func (s *sim) deliver(m msg) {
	t, p, v := s.t, m.p, m.p.ds[m.ds]
	superseded := p.w.Incarnation < s.fenced || p.w.Incarnation < s.newest[p.w.Name]
	var err error
	var res LeaseResult
	switch m.kind {
	case "lease":
		res, err = s.m.Lease(m.ds, LeaseRequest{Worker: p.w, Max: m.max, ID: m.id}, t0)
	case "complete":
		err = s.m.Complete(m.ds, m.id, p.w, t0)
	case "fail":
		err = s.m.Fail(m.ds, m.id, p.w, t0)
	}
	if superseded != errors.Is(err, ErrSuperseded) {
		t.Fatalf("%s %d of %v (fence %d, newest %d): %v", m.kind, m.id, p.w, s.fenced, s.newest[p.w.Name], err)
	}
	if superseded {
		if m.answer {
			p.alive, p.zombie = false, false // told to stop, it stops
		}
		return
	}
	s.newest[p.w.Name] = p.w.Incarnation
	if m.kind == "lease" {
		s.leased(m, res, err)
	} else {
		s.reported(m, err)
	}
	if !m.answer || !p.alive && !p.zombie {
		return
	}
	switch m.kind {
	case "lease":
		if m.id == v.lease {
			v.buf, v.lease, v.ended = append(v.buf, res.Shards...), 0, res.End
		}
	default:
		if v.report != nil && v.report.ID == m.id {
			v.report = nil
		}
	}
}

// leased checks a lease answer: a stale request is refused, a repeat gets
// the first answer's leases, a new request new leases.
func (s *sim) leased(m msg, res LeaseResult, err error) {
	t, p := s.t, m.p
	last := s.last[p][m.ds]
	switch {
	case m.id < last:
		if !errors.Is(err, ErrStaleRequest) {
			t.Fatalf("request %x of %v after %x: %+v, %v; want ErrStaleRequest", m.id, p.w, last, res, err)
		}
		return
	case err != nil:
		t.Fatalf("lease %x of %v: %v", m.id, p.w, err)
	case m.id == last:
		// A repeat: the first answer's leases that the worker has not
		// completed or failed since (nothing else requeues a worker's
		// leases while it is its name's newest incarnation above the
		// fence), and never a new one.
		var want []Lease
		for _, l := range s.granted[p][m.id] {
			if !s.released[m.ds][l.ID] {
				want = append(want, l)
			}
		}
		if !cmp.Equal(res.Shards, want) || len(want) == 0 && !res.Wait && !res.End {
			t.Fatalf("repeat of request %x of %v: %+v, want leases %+v", m.id, p.w, res, want)
		}
		return
	}
	s.last[p][m.ds] = m.id
	s.granted[p][m.id] = res.Shards
	for _, l := range res.Shards {
		if _, ok := s.leases[m.ds][l.ID]; ok {
			t.Fatalf("lease %d handed out twice", l.ID)
		}
		s.leases[m.ds][l.ID] = l
	}
}

// reported checks the answer to a complete or fail, and counts a first
// completion.
func (s *sim) reported(m msg, err error) {
	if err != nil && !errors.Is(err, ErrUnknownLease) {
		s.t.Fatalf("%s of lease %d by %v: %v", m.kind, m.id, m.p.w, err)
	}
	if err == nil {
		s.released[m.ds][m.id] = true
	}
	if err != nil || m.kind != "complete" || s.counted[m.ds][m.id] {
		return
	}
	s.counted[m.ds][m.id] = true
	l := s.leases[m.ds][m.id]
	for pos := l.Shard.Start; pos < l.Shard.End; pos++ {
		if s.covered[m.ds][[2]int64{int64(l.Shard.Epoch), pos}]++; s.covered[m.ds][[2]int64{int64(l.Shard.Epoch), pos}] > 1 {
			s.t.Fatalf("position %d of epoch %d of %s completed twice (lease %d)", pos, l.Shard.Epoch, m.ds, m.id)
		}
	}
}

// check verifies the machine's invariants and who holds what.
func (s *sim) check() {
	t := s.t
	checkInvariants(t, s.m)
	for _, ds := range s.dss {
		for id, l := range s.m.datasets[ds.Name].doing {
			w := Worker{Name: l.w.name, Incarnation: l.w.inc}
			if w.Incarnation < s.fenced || w.Incarnation != s.newest[w.Name] {
				t.Fatalf("%s lease %d held by %v: the fence is %d, the newest incarnation %d", ds.Name, id, w, s.fenced, s.newest[w.Name])
			}
			p := s.byW[w]
			if p == nil || !p.alive {
				continue // dead: the next fence takes it back
			}
			v := p.ds[ds.Name]
			known := v.report != nil && v.report.ID == id || slices.ContainsFunc(v.buf, func(b Lease) bool { return b.ID == id }) ||
				v.lease != 0 && slices.ContainsFunc(s.granted[p][v.lease], func(b Lease) bool { return b.ID == id })
			if !known {
				t.Fatalf("%s lease %d held by live %v, which does not know of it", ds.Name, id, w)
			}
		}
	}
}

// drain stops the faults: a last round with every node, the late copies
// delivered, then the workers run the datasets to their end.
func (s *sim) drain() {
	s.newRound(simNodes, true)
	for _, p := range s.procs {
		p.zombie = false
	}
	for len(s.pool) > 0 {
		s.deliverLate()
		s.check()
	}
	var live []*proc
	for _, p := range s.procs {
		if p.alive {
			live = append(live, p)
		}
	}
	for i := 0; !s.finished(); i++ {
		if i > 100_000 {
			var st []Status
			for _, ds := range s.dss {
				x, _ := s.m.Status(ds.Name)
				st = append(st, x)
			}
			s.t.Fatalf("the job hangs: %+v", st)
		}
		s.act(live[i%len(live)], true)
		s.check()
	}
	for _, ds := range s.dss {
		st, _ := s.m.Status(ds.Name)
		if len(st.Dropped) > 0 {
			s.t.Fatalf("%s dropped %v", ds.Name, st.Dropped)
		}
		for e := range ds.Epochs {
			for pos := range ds.Size {
				if n := s.covered[ds.Name][[2]int64{int64(e), pos}]; n != 1 {
					s.t.Fatalf("%s: position %d of epoch %d completed %d times", ds.Name, pos, e, n)
				}
			}
		}
		if len(s.covered[ds.Name]) != int(ds.Size)*ds.Epochs {
			s.t.Fatalf("%s: %d positions completed, want %d", ds.Name, len(s.covered[ds.Name]), int(ds.Size)*ds.Epochs)
		}
	}
}

func (s *sim) finished() bool {
	for _, ds := range s.dss {
		if st, _ := s.m.Status(ds.Name); !st.Finished {
			return false
		}
	}
	return true
}
