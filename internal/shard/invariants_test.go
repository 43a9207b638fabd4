package shard

import (
	"cmp"
	"slices"
	"testing"
	"time"
)

// checkInvariants verifies the machine's invariants, through Status and on
// its internal indexes.
func checkInvariants(t testing.TB, m *Machine) {
	t.Helper()
	held := 0
	for name, d := range m.datasets {
		if d.cfg.Name != name || d.cfg != d.cfg.normalized() {
			t.Fatalf("dataset %q: settings %+v not normalized or misfiled", name, d.cfg)
		}
		if d.cfg.Mode == Sync {
			checkSync(t, d)
			continue
		}
		held += len(d.doing)
		checkLeased(t, m, d)
	}
	// Every held lease is on its worker's list, and every list entry held.
	// Workers are at or above the fence; their last requests are of
	// distinct clients of Leased datasets, at most MaxClients of them.
	listed := 0
	if m.fence < 0 {
		t.Fatalf("fence %d", m.fence)
	}
	for name, w := range m.workers {
		if w.name != name || w.inc < m.fence || w.leases != nil && w.leases.wprev != nil {
			t.Fatalf("worker %q: %+v (fence %d)", name, w, m.fence)
		}
		for l := w.leases; l != nil; l = l.wnext {
			listed++
			if l.w != w || l.d.doing[l.id] != l || l.wnext != nil && l.wnext.wprev != l {
				t.Fatalf("worker %q list holds %+v", name, l)
			}
		}
		if len(w.reqs) > MaxClients {
			t.Fatalf("worker %q remembers %d requests", name, len(w.reqs))
		}
		for i, q := range w.reqs {
			if d := m.datasets[q.dataset]; d == nil || d.cfg.Mode != Leased || q.id == 0 || w.find(q.dataset, q.id) != i {
				t.Fatalf("worker %q request %d: %+v", name, i, q)
			}
		}
	}
	if listed != held {
		t.Fatalf("%d leases held, %d on worker lists", held, listed)
	}
	// The deadline queue holds exactly the held leases that can expire (each
	// held lease's side is checked in checkLeased; the queue's order is
	// package deadline's to test), and its next deadline is theirs.
	queued := 0
	var earliest time.Time
	for _, d := range m.datasets {
		for _, l := range d.doing {
			if !l.Queued() {
				continue
			}
			if queued++; queued == 1 || l.Deadline().Before(earliest) {
				earliest = l.Deadline()
			}
		}
	}
	if n := m.expiring.Len(); n != queued {
		t.Fatalf("the deadline queue holds %d leases, %d held leases are queued", n, queued)
	}
	dl, ok := m.NextDeadline()
	if ok != (queued > 0) || ok && !dl.Equal(earliest) {
		t.Fatalf("NextDeadline = %v, %v; want %v", dl, ok, earliest)
	}
}

func checkSync(t testing.TB, d *dataset) {
	t.Helper()
	p, err := normPosition(d, d.pos)
	if err != nil || p != d.pos || d.epoch != p.Epoch || d.finished != (d.cfg.Epochs > 0 && p.Epoch == d.cfg.Epochs) {
		t.Fatalf("sync dataset %q at %+v (epoch %d, finished %v): %v", d.cfg.Name, d.pos, d.epoch, d.finished, err)
	}
}

func checkLeased(t testing.TB, m *Machine, d *dataset) {
	t.Helper()
	name := d.cfg.Name
	s, err := m.Status(name)
	if err != nil {
		t.Fatal(err)
	}
	// Accounting: every position cut so far is queued, held, done or dropped,
	// exactly once.
	var ranges []task
	var retrySamples, doingSamples int64
	for _, r := range d.retry {
		ranges = append(ranges, r)
		retrySamples += r.end - r.start
	}
	for id, l := range d.doing {
		if l.id != id || l.d != d || id >= d.nextID || d.completed.has(id) {
			t.Fatalf("%s: held lease %d: %+v (next %d)", name, id, l, d.nextID)
		}
		if l.Queued() != (d.cfg.LeaseTimeout > 0) {
			t.Fatalf("%s: lease %d queued %v with LeaseTimeout %v", name, id, l.Queued(), d.cfg.LeaseTimeout)
		}
		ranges = append(ranges, l.task)
		doingSamples += l.end - l.start
	}
	var dropped int64
	for _, sh := range d.dropped {
		if sh.Epoch == d.epoch {
			ranges = append(ranges, task{start: sh.Start, end: sh.End})
			dropped += sh.End - sh.Start
		}
	}
	slices.SortFunc(ranges, func(a, b task) int { return cmp.Compare(a.start, b.start) })
	for i, r := range ranges {
		if r.start < 0 || r.start >= r.end || r.end > d.cursor || r.retries < 0 || r.retries >= d.cfg.MaxRetries {
			t.Fatalf("%s: shard %+v outside cursor %d or retries", name, r, d.cursor)
		}
		if i > 0 && r.start < ranges[i-1].end {
			t.Fatalf("%s: shards %+v and %+v overlap (leased twice at once?)", name, ranges[i-1], r)
		}
	}
	if retrySamples != d.retrySamples || doingSamples != d.doingSamples || dropped != d.dropSamples {
		t.Fatalf("%s: sample counters %d/%d/%d, counted %d/%d/%d", name, d.retrySamples, d.doingSamples, d.dropSamples, retrySamples, doingSamples, dropped)
	}
	if retrySamples+doingSamples+d.doneSamples+dropped != d.cursor {
		t.Fatalf("%s: queued %d + held %d + done %d + dropped %d samples != cursor %d", name, retrySamples, doingSamples, d.doneSamples, dropped, d.cursor)
	}
	total := d.limit()
	if d.cfg.Streaming {
		total -= s.Buffered
	}
	if s.TodoSamples+s.DoingSamples+s.DoneSamples+s.EpochDroppedSamples != total {
		t.Fatalf("%s: status samples %+v do not add up to %d", name, s, total)
	}
	if s.Todo != d.todo() || s.Doing != int64(len(d.doing)) || s.Done != d.done || s.EpochDropped != d.dropN {
		t.Fatalf("%s: status counts %+v", name, s)
	}
	if d.cfg.Streaming && (d.epoch != 0 || s.Buffered < 0 || s.Buffered >= d.cfg.ShardSize || s.Buffered > 0 && d.sealed) {
		t.Fatalf("%s: stream epoch %d buffered %d sealed %v", name, d.epoch, s.Buffered, d.sealed)
	}
	if d.cfg.Epochs > 0 && d.epoch >= d.cfg.Epochs {
		t.Fatalf("%s: epoch %d of %d", name, d.epoch, d.cfg.Epochs)
	}
	if d.finished != d.epochDone() || d.finished && !(d.cfg.Streaming || d.epoch == d.cfg.Epochs-1) {
		t.Fatalf("%s: finished %v, epoch done %v, epoch %d", name, d.finished, d.epochDone(), d.epoch)
	}
	for i, r := range d.completed.r {
		if r.lo < 1 || r.lo >= r.hi || r.hi > d.nextID || i > 0 && r.lo <= d.completed.r[i-1].hi {
			t.Fatalf("%s: completed set %v not canonical", name, d.completed.r)
		}
	}
}
