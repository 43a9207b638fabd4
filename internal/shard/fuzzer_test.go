package shard

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fuzzDatasets derives the fuzzed datasets from six bytes: two leased ones
// (the second shuffled), a stream and a Sync one.
func fuzzDatasets(b []byte) []Dataset {
	timeout := func(x byte) time.Duration { return time.Duration(x%3) * 5 * sec }
	return []Dataset{
		{Name: "a", Size: 1 + int64(b[0]%40), BatchSize: 1, ShardSize: 1 + int64(b[0]/40%7), Epochs: int(b[1] % 3),
			LeaseTimeout: timeout(b[1] / 3), MaxRetries: int(b[1] / 9 % 4)},
		{Name: "b", Size: 1 + int64(b[2]%30), BatchSize: 1, ShardSize: 1 + int64(b[2]/30%5), Epochs: 1 + int(b[3]%2),
			Shuffle: true, Seed: uint64(b[3]), LeaseTimeout: timeout(b[3] / 2), MaxRetries: 1 + int(b[3]/6%3)},
		{Name: "s", Size: int64(b[4]%2) * 30, BatchSize: 1, ShardSize: 1 + int64(b[4]/2%5), Streaming: true,
			LeaseTimeout: timeout(b[4] / 10)},
		{Name: "y", Size: 1 + int64(b[5]%50), BatchSize: 1 + int(b[5]/50%3), Epochs: int(b[5] % 3), Mode: Sync},
	}
}

// tracked is what the fuzzer knows of one leased dataset: who completed
// which positions of the current epoch.
type tracked struct {
	epoch    int
	finished bool
	covered  map[int64]int // position -> completions in the current epoch
}

type leaseInfo struct {
	ds     string
	l      Lease
	worker string
	stale  bool // issued before a RestoreDataset of its dataset
}

// fuzzer plays random events and checks, besides the machine's invariants,
// that every position of a finished epoch was completed exactly once or
// dropped.
type fuzzer struct {
	t      testing.TB
	m      *Machine
	now    time.Time
	dss    map[string]Dataset
	track  map[string]*tracked
	leases []leaseInfo
	done   map[string]map[uint64]bool // completions that counted
	saved  map[string][]byte          // DatasetState
	snap   map[string]tracked         // tracker at DatasetState
	pos    Position                   // Sync dataset "y"
}

func newFuzzer(t testing.TB, dss []Dataset) *fuzzer {
	f := &fuzzer{t: t, m: New(), now: t0, dss: map[string]Dataset{}, track: map[string]*tracked{},
		done: map[string]map[uint64]bool{}, saved: map[string][]byte{}, snap: map[string]tracked{}}
	for _, ds := range dss {
		if err := f.m.Register(ds, t0); err != nil {
			t.Fatalf("Register(%+v): %v", ds, err)
		}
		f.dss[ds.Name] = ds
		f.done[ds.Name] = map[uint64]bool{}
		if ds.Mode == Leased {
			f.track[ds.Name] = &tracked{covered: map[int64]int{}}
		}
	}
	return f
}

var leasedNames = []string{"a", "b", "s"}

func (f *fuzzer) play(ops []byte) {
	for i := 0; i+2 < len(ops); i += 3 {
		kind, x, arg := ops[i]%15, int(ops[i+1]), int(ops[i+2])
		ds, w := leasedNames[x%3], fmt.Sprintf("w%d", x/3%4)
		f.step(kind, ds, w, x, arg)
		checkInvariants(f.t, f.m)
		f.checkEpochs()
	}
}

func (f *fuzzer) pick(arg int) (leaseInfo, bool) {
	if len(f.leases) == 0 {
		return leaseInfo{}, false
	}
	return f.leases[arg%len(f.leases)], true
}

func (f *fuzzer) step(kind byte, ds, w string, x, arg int) {
	t := f.t
	switch kind {
	case 0, 1:
		r, err := f.m.Lease(ds, LeaseRequest{Worker: Worker{Name: w}, Max: 1 + arg%3}, f.now)
		if err != nil {
			t.Fatalf("Lease: %v", err)
		}
		f.leased(ds, w, r)
	case 2, 3, 4, 5:
		li, ok := f.pick(arg)
		if !ok {
			return
		}
		if x%5 == 0 {
			li.worker = w // sometimes the wrong worker
		}
		var err error
		switch kind {
		case 2, 3:
			err = f.m.Complete(li.ds, li.l.ID, Worker{Name: li.worker}, f.now)
			f.completed(li, err)
		case 4:
			err = f.m.Fail(li.ds, li.l.ID, Worker{Name: li.worker}, f.now)
		case 5:
			err = f.m.Renew(li.ds, li.l.ID, Worker{Name: li.worker}, f.now)
		}
		if err != nil && !errors.Is(err, ErrUnknownLease) && !errors.Is(err, ErrNotHolder) {
			t.Fatalf("op %d on lease %+v: %v", kind, li, err)
		}
	case 6:
		f.m.WorkerLost(w, f.now)
	case 7:
		f.now = f.now.Add(time.Duration(arg%16) * sec)
	case 8:
		f.m.Tick(f.now)
	case 9:
		if _, err := f.m.Append("s", int64(arg%8), f.now); err != nil && !errors.Is(err, ErrSealed) {
			t.Fatalf("Append: %v", err)
		}
	case 10:
		if arg%4 == 0 {
			if err := f.m.Seal("s", f.now); err != nil {
				t.Fatalf("Seal: %v", err)
			}
		}
	case 11:
		f.sync(x, arg)
	case 12:
		f.roundTrip()
	case 13:
		f.checkpoint(ds, arg)
	case 14:
		d := f.dss[ds]
		if arg%2 == 1 {
			d.BatchSize++
		}
		if err := f.m.Register(d, f.now); (err != nil) != (arg%2 == 1) || err != nil && !errors.Is(err, ErrConflict) {
			t.Fatalf("Register (changed %v): %v", arg%2 == 1, err)
		}
	}
}

func (f *fuzzer) leased(ds, w string, r LeaseResult) {
	s, _ := f.m.Status(ds)
	switch {
	case r.End != s.Finished || r.End && (r.Wait || len(r.Shards) > 0) || r.Wait && len(r.Shards) > 0:
		f.t.Fatalf("Lease = %+v with status %+v", r, s)
	case !r.End && !r.Wait && len(r.Shards) == 0:
		f.t.Fatalf("Lease = %+v: no shards, no Wait, no End", r)
	}
	d := f.dss[ds]
	for _, l := range r.Shards {
		if l.Shard.Epoch != s.Epoch || d.Shuffle != (l.Shard.Samples != nil) {
			f.t.Fatalf("lease %+v in epoch %d", l, s.Epoch)
		}
		if d.Shuffle && !cmp.Equal(l.Shard.Samples, EpochOrder(d, l.Shard.Epoch).AppendRange(nil, l.Shard.Start, l.Shard.End)) {
			f.t.Fatalf("lease %+v: samples are not the epoch's order", l)
		}
		f.leases = append(f.leases, leaseInfo{ds: ds, l: l, worker: w})
	}
	if len(f.leases) > 64 {
		f.leases = f.leases[len(f.leases)-64:]
	}
}

// completed records a successful first completion as coverage.
func (f *fuzzer) completed(li leaseInfo, err error) {
	if err != nil {
		if f.done[li.ds][li.l.ID] && !li.stale && !errors.Is(err, ErrNotHolder) {
			f.t.Fatalf("repeated Complete of %+v: %v", li, err)
		}
		return
	}
	if li.stale {
		f.t.Fatalf("Complete of lease %+v issued before a RestoreDataset succeeded", li)
	}
	if f.done[li.ds][li.l.ID] {
		return // a repeat
	}
	f.done[li.ds][li.l.ID] = true
	tr := f.track[li.ds]
	if li.l.Shard.Epoch != tr.epoch {
		f.t.Fatalf("lease %+v of epoch %d completed in epoch %d", li, li.l.Shard.Epoch, tr.epoch)
	}
	for p := li.l.Shard.Start; p < li.l.Shard.End; p++ {
		if tr.covered[p]++; tr.covered[p] > 1 {
			f.t.Fatalf("position %d of epoch %d of %s completed twice (lease %+v)", p, tr.epoch, li.ds, li.l)
		}
	}
}

// checkEpochs verifies the coverage of every epoch that just ended.
func (f *fuzzer) checkEpochs() {
	for name, tr := range f.track {
		s, _ := f.m.Status(name)
		if s.Epoch == tr.epoch && s.Finished == tr.finished {
			continue
		}
		if s.Epoch != tr.epoch+1 && !(s.Epoch == tr.epoch && s.Finished) {
			f.t.Fatalf("%s jumped from epoch %d to %d", name, tr.epoch, s.Epoch)
		}
		cov := tr.covered
		for _, d := range s.Dropped {
			if d.Epoch == tr.epoch {
				for p := d.Start; p < d.End; p++ {
					cov[p]++
				}
			}
		}
		end := f.dss[name].Size
		if f.dss[name].Streaming {
			end = s.Appended
		}
		for p := range end {
			if cov[p] != 1 {
				f.t.Fatalf("%s epoch %d ended with position %d completed or dropped %d times", name, tr.epoch, p, cov[p])
			}
		}
		if int64(len(cov)) != end {
			f.t.Fatalf("%s epoch %d covered %d positions of %d", name, tr.epoch, len(cov), end)
		}
		*tr = tracked{epoch: s.Epoch, finished: s.Finished, covered: map[int64]int{}}
	}
}

func (f *fuzzer) sync(x, arg int) {
	d := f.dss["y"]
	p := Position{f.pos.Epoch + arg%3 - 1, int64(arg/3) % (d.Size + 1)}
	var err error
	if x%4 == 0 {
		err = f.m.RestorePosition("y", p, f.now)
	} else {
		err = f.m.Advance("y", p.Epoch, p.Consumed, f.now)
	}
	if err == nil {
		f.pos, _ = f.m.Position("y")
		return
	}
	norm := p
	if norm.Consumed == d.Size {
		norm = Position{norm.Epoch + 1, 0}
	}
	valid := p.Epoch >= 0 && (d.Epochs == 0 || norm.Epoch < d.Epochs || norm == Position{d.Epochs, 0})
	stale := valid && x%4 != 0 && norm.before(f.pos)
	if errors.Is(err, ErrStalePosition) != stale || !stale && (valid || !errors.Is(err, ErrInvalidRequest)) {
		f.t.Fatalf("position %+v from %+v: %v", p, f.pos, err)
	}
}

func (f *fuzzer) roundTrip() {
	data, err := f.m.MarshalState()
	if err != nil {
		f.t.Fatal(err)
	}
	r, err := Restore(data)
	if err != nil {
		f.t.Fatalf("Restore of MarshalState output: %v\n%s", err, data)
	}
	checkInvariants(f.t, r)
	cmpMachines(f.t, f.m, r)
	f.m = r
}

func (f *fuzzer) checkpoint(ds string, arg int) {
	if arg%2 == 0 {
		data, err := f.m.DatasetState(ds)
		if err != nil {
			f.t.Fatal(err)
		}
		f.saved[ds] = data
		tr := *f.track[ds]
		tr.covered = make(map[int64]int, len(tr.covered))
		for p, c := range f.track[ds].covered {
			tr.covered[p] = c
		}
		f.snap[ds] = tr
		return
	}
	data := f.saved[ds]
	if data == nil {
		return
	}
	if err := f.m.RestoreDataset(ds, data, f.now); err != nil {
		f.t.Fatalf("RestoreDataset: %v", err)
	}
	tr := f.snap[ds]
	tr.covered = make(map[int64]int, len(tr.covered))
	for p, c := range f.snap[ds].covered {
		tr.covered[p] = c
	}
	*f.track[ds] = tr
	for i := range f.leases {
		if f.leases[i].ds == ds {
			f.leases[i].stale = true
		}
	}
	// A restored stream keeps what was appended since: a finished epoch
	// may need re-checking from the snapshot, which checkEpochs does.
}
