package shard

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const sec = time.Second

// env drives a machine over a fake clock, checking invariants after every
// event.
type env struct {
	t   *testing.T
	m   *Machine
	now time.Time
}

func newEnv(t *testing.T, dss ...Dataset) *env {
	t.Helper()
	e := &env{t: t, m: New(), now: t0}
	for _, ds := range dss {
		if err := e.m.Register(ds, e.now); err != nil {
			t.Fatalf("Register(%+v): %v", ds, err)
		}
	}
	return e
}

func (e *env) after(d time.Duration) *env { e.now = e.now.Add(d); return e }

func (e *env) check() { e.t.Helper(); checkInvariants(e.t, e.m) }

func (e *env) lease(ds, w string, max int) LeaseResult {
	e.t.Helper()
	r, err := e.m.Lease(ds, LeaseRequest{Worker: Worker{Name: w}, Max: max}, e.now)
	if err != nil {
		e.t.Fatalf("Lease(%s, %s, %d): %v", ds, w, max, err)
	}
	e.check()
	return r
}

// lease1 leases one shard and checks its range.
func (e *env) lease1(ds, w string, start, end int64) Lease {
	e.t.Helper()
	r := e.lease(ds, w, 1)
	if len(r.Shards) != 1 || r.Shards[0].Shard.Start != start || r.Shards[0].Shard.End != end {
		e.t.Fatalf("Lease(%s, %s) = %+v; want shard [%d, %d)", ds, w, r, start, end)
	}
	return r.Shards[0]
}

func (e *env) wantWait(ds, w string) {
	e.t.Helper()
	if r := e.lease(ds, w, 1); !r.Wait || r.End || len(r.Shards) > 0 {
		e.t.Fatalf("Lease(%s, %s) = %+v; want Wait", ds, w, r)
	}
}

func (e *env) wantEnd(ds, w string) {
	e.t.Helper()
	if r := e.lease(ds, w, 1); !r.End || r.Wait || len(r.Shards) > 0 {
		e.t.Fatalf("Lease(%s, %s) = %+v; want End", ds, w, r)
	}
}

func (e *env) complete(ds string, l Lease, w string, want error) {
	e.t.Helper()
	if err := e.m.Complete(ds, l.ID, Worker{Name: w}, e.now); !errors.Is(err, want) || (err == nil) != (want == nil) {
		e.t.Fatalf("Complete(%s, %d, %s) = %v, want %v", ds, l.ID, w, err, want)
	}
	e.check()
}

func (e *env) fail(ds string, l Lease, w string) {
	e.t.Helper()
	if err := e.m.Fail(ds, l.ID, Worker{Name: w}, e.now); err != nil {
		e.t.Fatalf("Fail(%s, %d, %s): %v", ds, l.ID, w, err)
	}
	e.check()
}

func (e *env) status(ds string) Status {
	e.t.Helper()
	s, err := e.m.Status(ds)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// counts checks a leased dataset's epoch and shard counts.
func (e *env) counts(ds string, epoch int, todo, doing, done, dropped int64) {
	e.t.Helper()
	s := e.status(ds)
	got := []int64{int64(s.Epoch), s.Todo, s.Doing, s.Done, s.EpochDropped}
	if diff := cmp.Diff([]int64{int64(epoch), todo, doing, done, dropped}, got); diff != "" {
		e.t.Fatalf("%s: [epoch todo doing done dropped] (-want +got):\n%s", ds, diff)
	}
}

func leased(name string, size, shard int64) Dataset {
	return Dataset{Name: name, Size: size, BatchSize: 1, ShardSize: shard, Epochs: 1}
}

func TestLeaseComplete(t *testing.T) {
	e := newEnv(t, leased("d", 10, 4))
	e.counts("d", 0, 3, 0, 0, 0)
	r := e.lease("d", "w1", 2)
	if len(r.Shards) != 2 || !cmp.Equal(r.Shards[0].Shard, Shard{Start: 0, End: 4}) || !cmp.Equal(r.Shards[1].Shard, Shard{Start: 4, End: 8}) {
		t.Fatalf("Lease = %+v", r)
	}
	if !r.Shards[0].Deadline.IsZero() || r.Shards[0].ID != 1 || r.Shards[1].ID != 2 {
		t.Fatalf("lease without timeout: %+v", r)
	}
	tail := e.lease1("d", "w2", 8, 10) // the partial last shard
	e.counts("d", 0, 0, 3, 0, 0)
	e.wantWait("d", "w3")
	e.complete("d", tail, "w2", nil)
	e.complete("d", tail, "w2", nil) // a repeat is idempotent
	e.counts("d", 0, 0, 2, 1, 0)
	e.complete("d", r.Shards[0], "w2", ErrNotHolder)
	e.complete("d", Lease{ID: 99}, "w1", ErrUnknownLease)
	e.complete("d", r.Shards[0], "w1", nil)
	e.complete("d", r.Shards[1], "w1", nil)
	e.counts("d", 0, 0, 0, 3, 0)
	if s := e.status("d"); !s.Finished || s.DoneSamples != 10 {
		t.Fatalf("status %+v", s)
	}
	e.wantEnd("d", "w1")
}

func TestLeaseErrors(t *testing.T) {
	e := newEnv(t, leased("d", 10, 4), Dataset{Name: "s", Size: 10, BatchSize: 1, Mode: Sync})
	for _, tt := range []struct {
		ds, w string
		max   int
		want  error
	}{
		{"x", "w", 1, ErrUnknownDataset},
		{"s", "w", 1, ErrWrongMode},
		{"d", "", 1, ErrInvalidRequest},
		{"d", strings.Repeat("w", MaxNameLen+1), 1, ErrInvalidRequest},
		{"d", "w", 0, ErrInvalidRequest},
	} {
		if _, err := e.m.Lease(tt.ds, LeaseRequest{Worker: Worker{Name: tt.w}, Max: tt.max}, e.now); !errors.Is(err, tt.want) {
			t.Errorf("Lease(%q, %q, %d) = %v, want %v", tt.ds, tt.w, tt.max, err, tt.want)
		}
	}
	if _, err := e.m.Position("d"); !errors.Is(err, ErrWrongMode) {
		t.Errorf("Position of a leased dataset: %v", err)
	}
	if _, err := e.m.Append("d", 1, e.now); !errors.Is(err, ErrWrongMode) {
		t.Errorf("Append to a fixed dataset: %v", err)
	}
	if err := e.m.Renew("d", 1, Worker{Name: "w"}, e.now); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("Renew of no lease: %v", err)
	}
	if _, err := e.m.Status("x"); !errors.Is(err, ErrUnknownDataset) {
		t.Errorf("Status(x): %v", err)
	}
	if diff := cmp.Diff([]string{"d", "s"}, e.m.Datasets()); diff != "" {
		t.Fatalf("Datasets (-want +got):\n%s", diff)
	}
	r := e.lease("d", "w", 100) // more than there is: all 3
	if len(r.Shards) != 3 {
		t.Fatalf("Lease(max 100) = %d shards", len(r.Shards))
	}
	e.m.Register(leased("big", 5000, 1), e.now)
	if r := e.lease("big", "w", 1<<30); len(r.Shards) != MaxLeaseShards {
		t.Fatalf("Lease(max 2^30) = %d shards, want the cap %d", len(r.Shards), MaxLeaseShards)
	}
}

func TestExpiryRequeuesToFront(t *testing.T) {
	ds := leased("d", 40, 4)
	ds.LeaseTimeout = 10 * sec
	e := newEnv(t, ds)
	a := e.lease1("d", "w1", 0, 4)
	if !a.Deadline.Equal(t0.Add(10 * sec)) {
		t.Fatalf("deadline %v", a.Deadline)
	}
	b := e.after(2*sec).lease1("d", "w2", 4, 8)
	e.after(3 * sec)
	if err := e.m.Renew("d", a.ID, Worker{Name: "w1"}, e.now); err != nil { // a now expires at 15s
		t.Fatal(err)
	}
	if err := e.m.Renew("d", a.ID, Worker{Name: "w2"}, e.now); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Renew by another worker: %v", err)
	}
	if d, _ := e.m.NextDeadline(); !d.Equal(t0.Add(12 * sec)) {
		t.Fatalf("NextDeadline %v, want b's 12s", d.Sub(t0))
	}
	e.after(7 * sec) // 12s: b expires
	e.m.Tick(e.now)
	e.check()
	e.counts("d", 0, 9, 1, 0, 0)
	if d, _ := e.m.NextDeadline(); !d.Equal(t0.Add(15 * sec)) {
		t.Fatalf("NextDeadline %v, want a's 15s", d.Sub(t0))
	}
	// b's shard is at the front, with a retry counted.
	b2 := e.lease1("d", "w3", 4, 8)
	if b2.Retries != 1 || b2.ID == b.ID {
		t.Fatalf("requeued lease %+v", b2)
	}
	e.complete("d", b, "w2", ErrUnknownLease) // w2's late result must be discarded
	// a expires at 15s without a Tick: the next event applies it first.
	e.after(3 * sec)
	e.complete("d", a, "w1", ErrUnknownLease)
	e.lease1("d", "w1", 0, 4)
	e.lease1("d", "w1", 8, 12)
}

func TestWorkerLostRequeuesToFront(t *testing.T) {
	ds := leased("d", 40, 4)
	ds.LeaseTimeout = time.Minute
	e := newEnv(t, ds, leased("other", 8, 4))
	e.lease("d", "w1", 2)                               // [0,4) [4,8)
	e.lease1("d", "w2", 8, 12)                          //
	o := e.lease1("other", "w1", 0, 4)                  // w1 works on two datasets
	e.m.WorkerLost("w1", e.after(sec).now)              //
	e.check()                                           //
	e.counts("d", 0, 9, 1, 0, 0)                        //
	e.counts("other", 0, 2, 0, 0, 0)                    //
	if l := e.lease1("d", "w3", 0, 4); l.Retries != 0 { // front, lowest first, no retry counted
		t.Fatalf("retries %d after a lost worker", l.Retries)
	}
	e.lease1("d", "w3", 4, 8)
	e.lease1("d", "w3", 12, 16)
	e.complete("other", o, "w1", ErrUnknownLease)
	e.m.WorkerLost("nobody", e.now)
	if w := e.m.workers["w1"]; w == nil || w.leases != nil {
		t.Fatalf("lost worker %+v: want it remembered, without leases", w)
	}
	if d, _ := e.m.NextDeadline(); !d.Equal(t0.Add(time.Minute)) {
		t.Fatalf("NextDeadline %v; want w2's", d.Sub(t0))
	}
}

func TestRetriesThenDrop(t *testing.T) {
	ds := leased("d", 8, 4)
	ds.MaxRetries = 2
	ds.LeaseTimeout = 10 * sec
	e := newEnv(t, ds)
	l := e.lease1("d", "w", 0, 4)
	e.fail("d", l, "w")
	if err := e.m.Fail("d", l.ID, Worker{Name: "w"}, e.now); !errors.Is(err, ErrUnknownLease) {
		t.Fatalf("second Fail: %v", err)
	}
	l = e.lease1("d", "w", 0, 4) // retried first
	e.after(10 * sec)            // expiry counts as the second failure: dropped
	e.m.Tick(e.now)
	e.check()
	e.counts("d", 0, 1, 0, 0, 1)
	s := e.status("d")
	if diff := cmp.Diff([]Shard{{Epoch: 0, Start: 0, End: 4}}, s.Dropped); diff != "" || s.EpochDroppedSamples != 4 {
		t.Fatalf("Dropped (-want +got):\n%s", diff)
	}
	l = e.lease1("d", "w", 4, 8)
	e.complete("d", l, "w", nil)
	if s := e.status("d"); !s.Finished || s.Done != 1 || s.EpochDropped != 1 {
		t.Fatalf("status %+v", s)
	}
	e.wantEnd("d", "w")
}

func TestEpochsDoNotOverlap(t *testing.T) {
	ds := leased("d", 8, 4)
	ds.Epochs = 2
	e := newEnv(t, ds)
	a := e.lease1("d", "w1", 0, 4)
	b := e.lease1("d", "w2", 4, 8)
	e.complete("d", a, "w1", nil)
	e.wantWait("d", "w1") // w2 holds the epoch's last shard
	e.counts("d", 0, 0, 1, 1, 0)
	e.complete("d", b, "w2", nil) // epoch 0 done: epoch 1 starts
	e.counts("d", 1, 2, 0, 0, 0)
	c := e.lease1("d", "w1", 0, 4)
	if c.Shard.Epoch != 1 {
		t.Fatalf("shard of epoch %d", c.Shard.Epoch)
	}
	e.complete("d", c, "w1", nil)
	e.complete("d", e.lease1("d", "w1", 4, 8), "w1", nil)
	e.counts("d", 1, 0, 0, 2, 0)
	e.wantEnd("d", "w2")
	e.complete("d", a, "w1", nil) // a repeat from an earlier epoch is still idempotent
}

func TestUnboundedEpochs(t *testing.T) {
	ds := leased("d", 3, 2)
	ds.Epochs = 0
	e := newEnv(t, ds)
	for ep := range 5 {
		e.counts("d", ep, 2, 0, 0, 0)
		e.complete("d", e.lease1("d", "w", 0, 2), "w", nil)
		e.complete("d", e.lease1("d", "w", 2, 3), "w", nil)
	}
}

func TestRegisterConflict(t *testing.T) {
	ds := leased("d", 10, 4)
	e := newEnv(t, ds)
	same := ds
	same.MaxRetries = DefaultRetries // the default, spelled out
	if err := e.m.Register(same, e.now); err != nil {
		t.Fatalf("identical registration: %v", err)
	}
	other := ds
	other.ShardSize, other.Shuffle = 5, true
	err := e.m.Register(other, e.now)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "ShardSize 4, not 5") || !strings.Contains(err.Error(), "Shuffle false, not true") {
		t.Fatalf("conflicting registration: %v", err)
	}
	if s := e.status("d"); s.Dataset.ShardSize != 4 {
		t.Fatal("the first registration did not win")
	}
	sync := Dataset{Name: "s", Size: 10, BatchSize: 2, Mode: Sync}
	e.m.Register(sync, e.now)
	sync.ShardSize, sync.LeaseTimeout = 7, sec // ignored in Sync mode
	if err := e.m.Register(sync, e.now); err != nil {
		t.Fatalf("Sync registration differing only in ignored fields: %v", err)
	}
}

func TestValidate(t *testing.T) {
	err := Dataset{Size: -1, BatchSize: 0, ShardSize: -1, Epochs: -1, Mode: 5, LeaseTimeout: -1, MaxRetries: -1}.Validate()
	for _, f := range []string{"Name", "Size", "BatchSize", "ShardSize", "Epochs", "Mode", "LeaseTimeout", "MaxRetries"} {
		if !strings.Contains(err.Error(), f+" ") {
			t.Errorf("Validate error does not name %s: %v", f, err)
		}
	}
	if !errors.Is(err, ErrInvalidDataset) {
		t.Fatalf("%v does not wrap ErrInvalidDataset", err)
	}
	for _, ds := range []Dataset{
		{Name: "a", Size: 0, BatchSize: 1, ShardSize: 1},
		{Name: "a", Size: MaxSize + 1, BatchSize: 1, ShardSize: 1, Shuffle: true},
		{Name: "a", Size: 1 << 32, BatchSize: 1, ShardSize: MaxLeaseSamples + 1, Shuffle: true},
		{Name: "a", Size: 10, BatchSize: 1, ShardSize: 1, Epochs: MaxEpochs + 1},
		{Name: "a", Size: 10, BatchSize: MaxBatchSize + 1, Mode: Sync},
		{Name: "a", BatchSize: 1, ShardSize: 1, Streaming: true, Mode: Sync},
		{Name: "a", BatchSize: 1, ShardSize: 1, Streaming: true, Shuffle: true},
		{Name: "a", BatchSize: 1, ShardSize: 1, Streaming: true, Epochs: 2},
	} {
		if err := ds.Validate(); !errors.Is(err, ErrInvalidDataset) {
			t.Errorf("Validate(%+v) = %v", ds, err)
		}
	}
	// The limits themselves are valid.
	for _, ds := range []Dataset{
		{Name: "a", Size: MaxSize, BatchSize: MaxBatchSize, ShardSize: MaxLeaseSamples, Epochs: MaxEpochs, Shuffle: true},
		{Name: "a", Size: MaxSize, BatchSize: 1, ShardSize: MaxSize, Epochs: MaxEpochs},
		{Name: "a", Size: MaxSize, BatchSize: MaxBatchSize, Epochs: MaxEpochs, Shuffle: true, Mode: Sync},
		{Name: "a", Size: 10, BatchSize: 1, ShardSize: MaxLeaseSamples + 1, Shuffle: true, Mode: Sync}, // ShardSize ignored
	} {
		if err := ds.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", ds, err)
		}
	}
	if err := New().Register(Dataset{Name: "a"}, t0); !errors.Is(err, ErrInvalidDataset) {
		t.Fatalf("Register of an invalid dataset: %v", err)
	}
}

func TestShuffledLeases(t *testing.T) {
	ds := Dataset{Name: "d", Size: 20, BatchSize: 1, ShardSize: 6, Epochs: 2, Shuffle: true, Seed: 42}
	e := newEnv(t, ds)
	for ep := range 2 {
		order := EpochOrder(ds, ep)
		var seen []int64
		for {
			r := e.lease("d", "w", 1)
			if len(r.Shards) == 0 {
				break
			}
			l := r.Shards[0]
			if want := order.AppendRange(nil, l.Shard.Start, l.Shard.End); !cmp.Equal(want, l.Shard.Samples) || !cmp.Equal(want, l.Shard.Indices()) {
				t.Fatalf("epoch %d shard %+v; want samples %v", ep, l.Shard, want)
			}
			seen = append(seen, l.Shard.Samples...)
			e.complete("d", l, "w", nil)
			if e.status("d").Epoch != ep || e.status("d").Finished {
				break
			}
		}
		if len(seen) != 20 {
			t.Fatalf("epoch %d: %d samples", ep, len(seen))
		}
	}
}

// TestShuffledLeaseCap: one call hands out at most MaxLeaseSamples shuffled
// samples, but always a shard when one is queued, requeued shards included;
// an unshuffled dataset's shards are ranges and have no such cap.
func TestShuffledLeaseCap(t *testing.T) {
	quarter := int64(MaxLeaseSamples / 4)
	ds := Dataset{Name: "d", Size: 1 << 32, BatchSize: 1, ShardSize: quarter, Shuffle: true, Seed: 1}
	plain := Dataset{Name: "p", Size: 1 << 32, BatchSize: 1, ShardSize: quarter}
	e := newEnv(t, ds, plain)
	if r := e.lease("d", "w", 10); len(r.Shards) != 4 {
		t.Fatalf("leased %d shards of %d samples in one call; want 4", len(r.Shards), quarter)
	}
	if r := e.lease("p", "w", 10); len(r.Shards) != 10 {
		t.Fatalf("leased %d unshuffled shards; want 10", len(r.Shards))
	}
	big := Dataset{Name: "b", Size: 3*MaxLeaseSamples - 5, BatchSize: 1, ShardSize: MaxLeaseSamples, Shuffle: true, Seed: 2}
	if err := e.m.Register(big, e.now); err != nil {
		t.Fatal(err)
	}
	r := e.lease("b", "w", 3)
	if len(r.Shards) != 1 || r.Shards[0].Shard.Len() != MaxLeaseSamples {
		t.Fatalf("leased %+v; want one full shard", r.Shards)
	}
	e.m.WorkerLost("w", e.now)
	e.check()
	if r := e.lease("b", "w2", 3); len(r.Shards) != 1 || r.Shards[0].Shard.Start != 0 {
		t.Fatalf("after a requeue leased %d shards; want the requeued one alone", len(r.Shards))
	}
	if r := e.lease("b", "w2", 3); len(r.Shards) != 1 {
		t.Fatalf("leased %d shards; want 1", len(r.Shards))
	}
	if r := e.lease("b", "w2", 3); len(r.Shards) != 1 || r.Shards[0].Shard.Len() != MaxLeaseSamples-5 {
		t.Fatalf("leased %+v; want the last, short shard", r.Shards)
	}
}
