package shard

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// op is one event of a persistence scenario.
type op struct {
	after time.Duration
	kind  string // lease, complete, fail, renew, lost, fence, tick, append, seal, advance, rewind, register
	ds, w string
	inc   int64  // the worker's incarnation
	n     int64  // lease: max; append: samples; advance/rewind: consumed; fence: the minimum incarnation
	id    uint64 // complete/fail/renew: lease ID; lease: request ID; advance/rewind: epoch
}

// apply plays o on m and returns what it returned, for comparisons.
func (o op) apply(m *Machine, now time.Time) any {
	errText := func(err error) any {
		if err == nil {
			return nil
		}
		return err.Error()
	}
	w := Worker{Name: o.w, Incarnation: o.inc}
	switch o.kind {
	case "lease":
		r, err := m.Lease(o.ds, LeaseRequest{Worker: w, Max: int(o.n), ID: o.id}, now)
		return []any{r, errText(err)}
	case "complete":
		return errText(m.Complete(o.ds, o.id, w, now))
	case "fail":
		return errText(m.Fail(o.ds, o.id, w, now))
	case "renew":
		return errText(m.Renew(o.ds, o.id, w, now))
	case "lost":
		m.WorkerLost(o.w, now)
	case "fence":
		m.Fence(o.n, now)
	case "tick":
		m.Tick(now)
	case "append":
		end, err := m.Append(o.ds, o.n, now)
		return []any{end, errText(err)}
	case "seal":
		return errText(m.Seal(o.ds, now))
	case "advance":
		return errText(m.Advance(o.ds, int(o.id), o.n, now))
	case "rewind":
		return errText(m.RestorePosition(o.ds, Position{int(o.id), o.n}, now))
	default:
		panic(o.kind)
	}
	return nil
}

func persistDatasets() []Dataset {
	return []Dataset{
		{Name: "d", Size: 20, BatchSize: 2, ShardSize: 4, Epochs: 2, LeaseTimeout: 10 * sec, MaxRetries: 2},
		{Name: "sh", Size: 12, BatchSize: 1, ShardSize: 5, Epochs: 2, Shuffle: true, Seed: 3},
		{Name: "st", BatchSize: 1, ShardSize: 3, Streaming: true, LeaseTimeout: 30 * sec},
		{Name: "sy", Size: 100, BatchSize: 4, Epochs: 3, Mode: Sync},
	}
}

var persistOps = []op{
	{kind: "lease", ds: "d", w: "a", n: 2}, {kind: "lease", ds: "d", w: "b", n: 1},
	{kind: "lease", ds: "sh", w: "a", n: 2}, {kind: "append", ds: "st", n: 7},
	{kind: "lease", ds: "st", w: "c", n: 5}, {kind: "advance", ds: "sy", n: 16},
	{after: 4 * sec, kind: "renew", ds: "d", w: "a", id: 1}, {kind: "complete", ds: "d", w: "a", id: 2},
	{kind: "fail", ds: "d", w: "b", id: 3}, {kind: "lease", ds: "d", w: "c", n: 3},
	{after: 7 * sec, kind: "tick"}, {kind: "complete", ds: "sh", w: "a", id: 1},
	{kind: "lost", w: "c"}, {kind: "lease", ds: "d", w: "b", n: 4},
	{kind: "complete", ds: "d", w: "b", id: 7}, {kind: "complete", ds: "d", w: "b", id: 7},
	{kind: "lease", ds: "st", w: "a", n: 1}, {kind: "append", ds: "st", n: 5}, {kind: "seal", ds: "st"},
	{after: 3 * sec, kind: "lease", ds: "st", w: "a", n: 9}, {kind: "complete", ds: "st", w: "a", id: 3},
	{kind: "advance", ds: "sy", id: 1, n: 0}, {kind: "advance", ds: "sy", n: 40},
	{after: 20 * sec, kind: "tick"}, {kind: "lease", ds: "d", w: "a", n: 10},
	{kind: "complete", ds: "d", w: "a", id: 10}, {kind: "complete", ds: "d", w: "a", id: 11},
	{kind: "complete", ds: "d", w: "a", id: 12}, {kind: "complete", ds: "d", w: "a", id: 13},
	{kind: "complete", ds: "d", w: "a", id: 14}, {kind: "lease", ds: "d", w: "a", n: 10},
	{kind: "complete", ds: "sh", w: "a", id: 2}, {kind: "lease", ds: "sh", w: "b", n: 10},
	{kind: "complete", ds: "sh", w: "b", id: 3}, {kind: "lease", ds: "sh", w: "b", n: 1},
	{kind: "rewind", ds: "sy", id: 0, n: 20}, {kind: "lease", ds: "st", w: "b", n: 9},
	{after: time.Minute, kind: "lease", ds: "st", w: "b", n: 9}, {kind: "lost", w: "a"},
	{kind: "lease", ds: "d", w: "b", n: 1}, {kind: "fail", ds: "d", w: "b", id: 18},
	{kind: "complete", ds: "st", w: "b", id: 7}, {kind: "complete", ds: "st", w: "b", id: 8},
	{kind: "complete", ds: "st", w: "b", id: 9}, {kind: "lease", ds: "st", w: "b", n: 9},
	{kind: "complete", ds: "st", w: "b", id: 10}, {kind: "lease", ds: "st", w: "b", n: 9},
	{kind: "advance", ds: "sy", id: 3, n: 0}, {kind: "lease", ds: "d", w: "b", n: 2},
	// Incarnations, fences and repeated requests.
	{kind: "rewind", ds: "sy", n: 0}, {kind: "lease", ds: "d", w: "e", inc: 1, n: 2, id: 7<<32 | 1},
	{kind: "lease", ds: "d", w: "e", inc: 1, n: 2, id: 7<<32 | 1}, {kind: "lease", ds: "d", w: "e", inc: 1, n: 1, id: 9<<32 | 1},
	{kind: "lease", ds: "d", w: "e", inc: 1, n: 1, id: 7 << 32}, {kind: "complete", ds: "d", w: "e", inc: 1, id: 21},
	{kind: "lease", ds: "d", w: "e", inc: 2, n: 1, id: 7<<32 | 1}, {kind: "lease", ds: "d", w: "e", inc: 1, n: 1},
	{kind: "lease", ds: "d", w: "f", inc: 2, n: 1, id: 3}, {kind: "fence", n: 3},
	{kind: "lease", ds: "d", w: "f", inc: 2, n: 1, id: 4}, {kind: "lease", ds: "d", w: "f", inc: 3, n: 1, id: 4},
	{kind: "lease", ds: "d", w: "f", inc: 3, n: 1, id: 4}, {kind: "fence", n: 2},
}

func newPersistMachine(t testing.TB) *Machine {
	m := New()
	for _, ds := range persistDatasets() {
		if err := m.Register(ds, t0); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// TestPersistRoundTrip saves after every step of a busy scenario, restores,
// and checks that the restored machine reports the same state and reacts to
// the rest of the scenario exactly like the original.
func TestPersistRoundTrip(t *testing.T) {
	for cut := 0; cut <= len(persistOps); cut++ {
		orig, now := newPersistMachine(t), t0
		for _, o := range persistOps[:cut] {
			now = now.Add(o.after)
			o.apply(orig, now)
			checkInvariants(t, orig)
		}
		data, err := orig.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), `{"schema":3,`) {
			t.Fatalf("no schema field in %s", data)
		}
		restored, err := Restore(data)
		if err != nil {
			t.Fatalf("cut %d: Restore: %v\n%s", cut, err, data)
		}
		checkInvariants(t, restored)
		cmpMachines(t, orig, restored)
		for i, o := range persistOps[cut:] {
			now = now.Add(o.after)
			a, b := o.apply(orig, now), o.apply(restored, now)
			if diff := cmp.Diff(a, b); diff != "" {
				t.Fatalf("cut %d, step %d (%+v): results differ (-orig +restored):\n%s", cut, cut+i, o, diff)
			}
			checkInvariants(t, restored)
			cmpMachines(t, orig, restored)
		}
	}
}

func cmpMachines(t testing.TB, a, b *Machine) {
	t.Helper()
	for name := range a.datasets {
		sa, _ := a.Status(name)
		sb, err := b.Status(name)
		if diff := cmp.Diff(sa, sb); diff != "" || err != nil {
			t.Fatalf("dataset %s: %v, status (-a +b):\n%s", name, err, diff)
		}
	}
	da, oka := a.NextDeadline()
	db, okb := b.NextDeadline()
	if oka != okb || !da.Equal(db) {
		t.Fatalf("deadlines differ: %v %v, %v %v", da, oka, db, okb)
	}
	ja, _ := a.MarshalState()
	jb, _ := b.MarshalState()
	if string(ja) != string(jb) {
		t.Fatalf("states differ:\n%s\n%s", ja, jb)
	}
}

func TestRestoreRejects(t *testing.T) {
	m, now := newPersistMachine(t), t0
	for _, o := range persistOps[:12] {
		now = now.Add(o.after)
		o.apply(m, now)
	}
	good, _ := m.MarshalState()
	tests := []struct {
		name, old, new, wantInMsg string
	}{
		{"unknown schema", `"schema":3`, `"schema":4`, "schema 4"},
		{"missing schema", `"schema":3,`, ``, "schema 0"},
		{"unknown field", `"schema":3,`, `"schema":3,"extra":true,`, "extra"},
		{"trailing data", `]}`, `]}{}`, "after"},
		{"truncated", `]}`, `]`, ""},
		{"invalid settings", `"shard_size":4`, `"shard_size":0`, "ShardSize"},
		{"bad mode", `"mode":"Sync"`, `"mode":"Async"`, "Async"},
		{"bad duration", `"lease_timeout":"10s"`, `"lease_timeout":"ten"`, "lease_timeout"},
		{"not normalized", `"max_retries":3`, `"max_retries":0`, "normalized"},
		{"unsorted datasets", `"name":"sh"`, `"name":"a"`, "sorted"},
		{"position of a leased dataset", `"epoch":0,"cursor":20`, `"epoch":0,"position":{"epoch":0,"consumed":0},"cursor":20`, "position"},
		{"position past the end", `"consumed":16`, `"consumed":101`, "position"},
		{"epoch past the end", `"epoch":0,"cursor":20`, `"epoch":2,"cursor":20`, "epoch 2"},
		{"overlapping shards", `"start":8,"end":12`, `"start":3,"end":12`, "overlap"},
		{"shard past the cursor", `"cursor":20`, `"cursor":19`, "cursor"},
		{"counts do not add up", `"done_samples":4`, `"done_samples":3`, "account"},
		{"retries at the limit", `"retries":1`, `"retries":2`, "retries"},
		{"lease ID not issued", `"next_id":7`, `"next_id":5`, "lease ID"},
		{"held and completed", `"completed":[[2,3]]`, `"completed":[[2,5]]`, "completed"},
		{"completed ranges", `"completed":[[2,3]]`, `"completed":[[3,2]]`, "completed"},
		{"deadline without timeout", `"sh","size"`, `"sh","size"`, ""}, // placeholder replaced below
		{"empty worker", `"worker":"c"`, `"worker":""`, "worker"},
		{"appended to a fixed dataset", `"epoch":0,"cursor":20`, `"epoch":0,"appended":3,"cursor":20`, "Streaming"},
		{"finished too early", `"epoch":0,"position"`, `"epoch":0,"finished":true,"position"`, "finished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "deadline without timeout" {
				tt.old, tt.new, tt.wantInMsg = `"lease_timeout":"10s"`, `"lease_timeout":"0s"`, "deadline"
			}
			data := strings.Replace(string(good), tt.old, tt.new, 1)
			if data == string(good) {
				t.Fatalf("replacement %q not found in %s", tt.old, good)
			}
			_, err := Restore([]byte(data))
			if !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Fatalf("Restore = %v, want ErrBadState mentioning %q\n%s", err, tt.wantInMsg, data)
			}
		})
	}
}

func TestDatasetStateCheckpoint(t *testing.T) {
	ds := leased("d", 20, 4)
	ds.Epochs, ds.LeaseTimeout = 3, time.Minute
	e := newEnv(t, ds)
	a := e.lease1("d", "w1", 0, 4)
	b := e.lease1("d", "w2", 4, 8)
	c := e.lease1("d", "w1", 8, 12)
	e.complete("d", b, "w2", nil)
	e.fail("d", c, "w1") // [8,12) requeued with one retry
	saved, err := e.m.DatasetState("d")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(saved), `{"schema":2,`) {
		t.Fatalf("no schema in %s", saved)
	}
	// Train on into epoch 1, then restore the checkpoint.
	for e.status("d").Epoch == 0 {
		for _, l := range e.lease("d", "w3", 10).Shards {
			e.complete("d", l, "w3", nil)
		}
		e.complete("d", a, "w1", nil)
	}
	last := e.lease1("d", "w3", 0, 4)
	if err := e.m.RestoreDataset("d", saved, e.now); err != nil {
		t.Fatal(err)
	}
	e.check()
	// The held lease a comes first, then the requeued [8,12), then the rest.
	e.counts("d", 0, 4, 0, 1, 0)
	if s := e.status("d"); s.DoneSamples != 4 || len(s.Workers) != 0 {
		t.Fatalf("status %+v", s)
	}
	a2 := e.lease1("d", "w4", 0, 4)
	if c2 := e.lease1("d", "w4", 8, 12); c2.Retries != 1 || a2.Retries != 0 {
		t.Fatalf("retries %d, %d", a2.Retries, c2.Retries)
	}
	e.lease1("d", "w4", 12, 16)
	if a2.ID <= last.ID {
		t.Fatalf("lease IDs went back: %d after %d", a2.ID, last.ID)
	}
	// Leases from before the restore are gone, even completed ones.
	e.complete("d", last, "w3", ErrUnknownLease)
	e.complete("d", b, "w2", ErrUnknownLease)

	// Another ShardSize and a lower MaxRetries apply after a restore.
	e2 := newEnv(t, func() Dataset { d := ds; d.ShardSize, d.MaxRetries = 3, 1; return d }())
	if err := e2.m.RestoreDataset("d", saved, e2.now); err != nil {
		t.Fatal(err)
	}
	e2.lease1("d", "w", 0, 4)
	if l := e2.lease1("d", "w", 8, 12); l.Retries != 0 {
		t.Fatalf("retries %d not lowered below MaxRetries 1", l.Retries)
	}
	e2.lease1("d", "w", 12, 15)

	for _, tt := range []struct {
		name string
		mod  func(*Dataset)
		want error
		msg  string
	}{
		{"other seed", func(d *Dataset) { d.Shuffle, d.Seed = true, 9 }, ErrConflict, "Shuffle"},
		{"other size", func(d *Dataset) { d.Size = 21 }, ErrConflict, "Size 21, not 20"},
		{"too few epochs", func(d *Dataset) { d.Epochs = 0 }, nil, ""},
	} {
		d := ds
		d.Name = "x"
		tt.mod(&d)
		e3 := newEnv(t, d)
		err := e3.m.RestoreDataset("x", saved, e3.now)
		if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) || err != nil && !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: RestoreDataset = %v, want %v mentioning %q", tt.name, err, tt.want, tt.msg)
		}
	}
	if err := e.m.RestoreDataset("nope", saved, e.now); !errors.Is(err, ErrUnknownDataset) {
		t.Fatalf("RestoreDataset of an unknown dataset: %v", err)
	}
	if err := e.m.RestoreDataset("d", []byte(`{"schema":3}`), e.now); !errors.Is(err, ErrBadState) {
		t.Fatalf("RestoreDataset of schema 3: %v", err)
	}
}

func TestDatasetStateEpochs(t *testing.T) {
	ds := leased("d", 4, 4)
	ds.Epochs = 3
	e := newEnv(t, ds)
	e.complete("d", e.lease1("d", "w", 0, 4), "w", nil)
	e.complete("d", e.lease1("d", "w", 0, 4), "w", nil)
	saved, _ := e.m.DatasetState("d") // epoch 2
	fewer := ds
	fewer.Epochs = 2
	e2 := newEnv(t, fewer)
	if err := e2.m.RestoreDataset("d", saved, e2.now); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "epoch 2") {
		t.Fatalf("restore past the last epoch: %v", err)
	}
	e.complete("d", e.lease1("d", "w", 0, 4), "w", nil)
	done, _ := e.m.DatasetState("d") // finished
	more := ds
	more.Epochs = 4
	e3 := newEnv(t, more)
	if err := e3.m.RestoreDataset("d", done, e3.now); err != nil {
		t.Fatal(err)
	}
	e3.counts("d", 3, 1, 0, 0, 0) // not finished with one more epoch: the next starts
}

func TestDatasetStateSync(t *testing.T) {
	e := newEnv(t, syncDS(100, 4, 2, true))
	e.m.Advance("s", 1, 40, e.now)
	saved, _ := e.m.DatasetState("s")
	e.m.Advance("s", 1, 80, e.now)
	if err := e.m.RestoreDataset("s", saved, e.now); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.m.Position("s"); p != (Position{1, 40}) {
		t.Fatalf("position %+v after restore", p)
	}
	e.check()
	want := (`{"schema":2,"dataset":{"name":"s","size":100,"batch_size":4,"shard_size":0,"epochs":2,"shuffle":true,"seed":11,"mode":"Sync","streaming":false,"lease_timeout":"0s","max_retries":0},"epoch":1,"position":{"epoch":1,"consumed":40}}`)
	if string(saved) != want {
		t.Fatalf("saved\n%s\nwant\n%s", saved, want)
	}
}
