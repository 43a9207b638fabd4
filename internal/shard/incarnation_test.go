package shard

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// call is one request of an incarnation scenario and what it must return.
type call struct {
	kind string // lease, complete, fail, renew, fence, lost
	ds   string
	w    Worker
	max  int
	req  uint64 // lease: request ID
	id   int    // complete/fail/renew: index of the lease in the scenario's leases so far
	min  int64  // fence
	want error
	// spans, for a lease: the [start, end) of each shard it must answer with;
	// wait or end instead.
	spans     [][2]int64
	wait, end bool
	// label names a lease call's answer; again, for a lease, is the label
	// of the call whose answer it must repeat (none of its leases new).
	label, again string
}

func wk(name string, inc int64) Worker { return Worker{Name: name, Incarnation: inc} }

// play runs calls on e, checking each answer, and returns every lease
// handed out, in order.
func (e *env) play(calls []call) []Lease {
	e.t.Helper()
	var leases []Lease
	answers := map[string][]Lease{}
	for i, c := range calls {
		var err error
		switch c.kind {
		case "lease":
			var r LeaseResult
			r, err = e.m.Lease(c.ds, LeaseRequest{Worker: c.w, Max: c.max, ID: c.req}, e.now)
			if err != nil {
				break
			}
			var spans [][2]int64
			for _, l := range r.Shards {
				spans = append(spans, [2]int64{l.Shard.Start, l.Shard.End})
			}
			if c.again != "" {
				if diff := cmp.Diff(answers[c.again], r.Shards); diff != "" {
					e.t.Fatalf("call %d %+v: not the answer of %q (-want +got):\n%s", i, c, c.again, diff)
				}
			} else {
				leases = append(leases, r.Shards...)
			}
			if c.label != "" {
				answers[c.label] = r.Shards
			}
			if !cmp.Equal(spans, c.spans) || r.Wait != c.wait || r.End != c.end {
				e.t.Fatalf("call %d %+v: got shards %v wait %v end %v", i, c, spans, r.Wait, r.End)
			}
		case "complete":
			err = e.m.Complete(c.ds, leases[c.id].ID, c.w, e.now)
		case "fail":
			err = e.m.Fail(c.ds, leases[c.id].ID, c.w, e.now)
		case "renew":
			err = e.m.Renew(c.ds, leases[c.id].ID, c.w, e.now)
		case "fence":
			e.m.Fence(c.min, e.now)
		case "lost":
			e.m.WorkerLost(c.w.Name, e.now)
		default:
			e.t.Fatalf("call %d: kind %q", i, c.kind)
		}
		if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			e.t.Fatalf("call %d %+v: %v, want %v", i, c, err, c.want)
		}
		e.check()
	}
	return leases
}

func TestIncarnations(t *testing.T) {
	tests := []struct {
		name   string
		calls  []call
		counts [5]int64 // epoch todo doing done dropped, at the end
	}{{
		name: "a newer incarnation takes over: the old one's leases go back first, without a failure",
		calls: []call{
			{kind: "lease", ds: "d", w: wk("n/0", 1), max: 2, spans: [][2]int64{{0, 4}, {4, 8}}},
			{kind: "lease", ds: "d", w: wk("n/1", 1), max: 1, spans: [][2]int64{{8, 12}}},
			{kind: "lease", ds: "d", w: wk("n/0", 2), max: 1, spans: [][2]int64{{0, 4}}},
			{kind: "lease", ds: "d", w: wk("n/0", 1), max: 1, want: ErrSuperseded},
			{kind: "complete", ds: "d", w: wk("n/0", 1), id: 0, want: ErrSuperseded},
			{kind: "fail", ds: "d", w: wk("n/0", 1), id: 1, want: ErrSuperseded},
			{kind: "renew", ds: "d", w: wk("n/0", 1), id: 1, want: ErrSuperseded},
			{kind: "complete", ds: "d", w: wk("n/0", 2), id: 0, want: ErrUnknownLease}, // the old incarnation's
			{kind: "complete", ds: "d", w: wk("n/0", 2), id: 3},
			{kind: "complete", ds: "d", w: wk("n/1", 1), id: 2}, // other names are not affected
		},
		counts: [5]int64{0, 3, 0, 2, 0},
	}, {
		name: "a fence requeues the leases below it and refuses their later requests",
		calls: []call{
			{kind: "lease", ds: "d", w: wk("a/0", 1), max: 1, spans: [][2]int64{{0, 4}}},
			{kind: "lease", ds: "d", w: wk("b/0", 1), max: 1, spans: [][2]int64{{4, 8}}},
			{kind: "lease", ds: "d", w: wk("c/0", 2), max: 1, spans: [][2]int64{{8, 12}}},
			{kind: "fence", min: 2},
			{kind: "lease", ds: "d", w: wk("a/0", 1), max: 1, want: ErrSuperseded},
			{kind: "complete", ds: "d", w: wk("b/0", 1), id: 1, want: ErrSuperseded},
			{kind: "lease", ds: "d", w: wk("x/9", 0), max: 1, want: ErrSuperseded}, // never seen, but below the fence
			{kind: "complete", ds: "d", w: wk("c/0", 2), id: 2},                    // at the fence: fine
			{kind: "lease", ds: "d", w: wk("b/0", 2), max: 3, spans: [][2]int64{{0, 4}, {4, 8}, {12, 16}}},
			{kind: "fence", min: 1}, // never back
			{kind: "lease", ds: "d", w: wk("a/0", 1), max: 1, want: ErrSuperseded},
		},
		counts: [5]int64{0, 1, 3, 1, 0},
	}, {
		name: "a lost worker's leases go back; its incarnation may go on until fenced",
		calls: []call{
			{kind: "lease", ds: "d", w: wk("a/0", 1), max: 2, spans: [][2]int64{{0, 4}, {4, 8}}},
			{kind: "lost", w: wk("a/0", 1)},
			{kind: "complete", ds: "d", w: wk("a/0", 1), id: 0, want: ErrUnknownLease},
			{kind: "lease", ds: "d", w: wk("a/0", 1), max: 1, spans: [][2]int64{{0, 4}}},
			{kind: "fence", min: 2},
			{kind: "lease", ds: "d", w: wk("a/0", 1), max: 1, want: ErrSuperseded},
		},
		counts: [5]int64{0, 5, 0, 0, 0},
	}, {
		name: "bad incarnations",
		calls: []call{
			{kind: "lease", ds: "d", w: wk("a/0", -1), max: 1, want: ErrInvalidRequest},
			{kind: "lease", ds: "d", w: wk("", 1), max: 1, want: ErrInvalidRequest},
			{kind: "lease", ds: "d", w: wk("a/0", 3), max: 1, spans: [][2]int64{{0, 4}}},
			// A superseded worker is told so before anything else is checked.
			{kind: "lease", ds: "nope", w: wk("a/0", 2), max: 0, want: ErrSuperseded},
			{kind: "fence", min: 5},
			{kind: "lease", ds: "nope", w: wk("a/0", 3), max: 1, want: ErrSuperseded},
		},
		counts: [5]int64{0, 5, 0, 0, 0},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, leased("d", 20, 4))
			e.play(tt.calls)
			c := tt.counts
			e.counts("d", int(c[0]), c[1], c[2], c[3], c[4])
		})
	}
}

func TestSupersededMessage(t *testing.T) {
	e := newEnv(t, leased("d", 20, 4))
	e.m.Fence(4, e.now)
	_, err := e.m.Lease("d", LeaseRequest{Worker: wk("n/0", 3), Max: 1}, e.now)
	for _, s := range []string{`"n/0"`, "incarnation 3", "round before 4", "must stop"} {
		if !strings.Contains(fmt.Sprint(err), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if e.m.MinIncarnation() != 4 {
		t.Errorf("MinIncarnation = %d, want 4", e.m.MinIncarnation())
	}
}

func TestLeaseDeduplication(t *testing.T) {
	const c1, c2 = 1 << 32, 2 << 32 // two clients of one worker
	w := wk("n/0", 1)
	tests := []struct {
		name  string
		calls []call
	}{{
		name: "a repeat gets the same leases, not new ones",
		calls: []call{
			{kind: "lease", ds: "d", w: w, max: 2, req: c1 | 1, spans: [][2]int64{{0, 4}, {4, 8}}, label: "1"},
			{kind: "lease", ds: "d", w: w, max: 2, req: c1 | 1, spans: [][2]int64{{0, 4}, {4, 8}}, again: "1"},
			{kind: "lease", ds: "d", w: w, max: 5, req: c1 | 1, spans: [][2]int64{{0, 4}, {4, 8}}, again: "1"}, // max does not matter
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 2, spans: [][2]int64{{8, 12}}, label: "2"},
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 1, want: ErrStaleRequest},
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 2, spans: [][2]int64{{8, 12}}, again: "2"},
		},
	}, {
		name: "a repeat gets only the leases still held, then Wait",
		calls: []call{
			{kind: "lease", ds: "d", w: w, max: 2, req: c1 | 5, spans: [][2]int64{{0, 4}, {4, 8}}},
			{kind: "complete", ds: "d", w: w, id: 0},
			{kind: "lease", ds: "d", w: w, max: 2, req: c1 | 5, spans: [][2]int64{{4, 8}}},
			{kind: "fail", ds: "d", w: w, id: 1},
			{kind: "lease", ds: "d", w: w, max: 2, req: c1 | 5, wait: true},
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 6, spans: [][2]int64{{4, 8}}}, // the failed shard, anew
		},
	}, {
		name: "a repeat of an answer that ended the dataset ends again",
		calls: []call{
			{kind: "lease", ds: "d", w: w, max: 9, req: 1, spans: [][2]int64{{0, 4}, {4, 8}, {8, 12}, {12, 16}, {16, 20}}},
			{kind: "complete", ds: "d", w: w, id: 0}, {kind: "complete", ds: "d", w: w, id: 1}, {kind: "complete", ds: "d", w: w, id: 2},
			{kind: "complete", ds: "d", w: w, id: 3}, {kind: "complete", ds: "d", w: w, id: 4},
			{kind: "lease", ds: "d", w: w, max: 9, req: 1, end: true},
			{kind: "lease", ds: "d", w: w, max: 9, req: 2, end: true},
			{kind: "lease", ds: "d", w: w, max: 9, req: 2, end: true},
		},
	}, {
		name: "clients, datasets and workers count apart",
		calls: []call{
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 7, spans: [][2]int64{{0, 4}}, label: "c1"},
			{kind: "lease", ds: "d", w: w, max: 1, req: c2 | 1, spans: [][2]int64{{4, 8}}, label: "c2"},
			{kind: "lease", ds: "e", w: w, max: 1, req: c1 | 1, spans: [][2]int64{{0, 2}}},
			{kind: "lease", ds: "d", w: wk("n/1", 1), max: 1, req: c1 | 1, spans: [][2]int64{{8, 12}}},
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 7, spans: [][2]int64{{0, 4}}, again: "c1"},
			{kind: "lease", ds: "d", w: w, max: 1, req: c2 | 1, spans: [][2]int64{{4, 8}}, again: "c2"},
			{kind: "lease", ds: "d", w: w, max: 1, req: 0, spans: [][2]int64{{12, 16}}}, // 0: never deduplicated
			{kind: "lease", ds: "d", w: w, max: 1, req: 0, spans: [][2]int64{{16, 20}}},
		},
	}, {
		name: "a new incarnation starts counting afresh",
		calls: []call{
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 9, spans: [][2]int64{{0, 4}}},
			{kind: "lease", ds: "d", w: wk("n/0", 2), max: 1, req: c1 | 1, spans: [][2]int64{{0, 4}}},
			{kind: "lease", ds: "d", w: w, max: 1, req: c1 | 9, want: ErrSuperseded},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, leased("d", 20, 4), leased("e", 4, 2))
			e.play(tt.calls)
		})
	}
}

// TestLeaseDeduplicationForgetsOldClients: past MaxClients clients of a
// worker, the least recently used one's request is forgotten (its repeat
// is served as new); a client used again is kept.
func TestLeaseDeduplicationForgetsOldClients(t *testing.T) {
	e := newEnv(t, leased("d", 1000, 1))
	w := wk("n/0", 1)
	lease := func(client uint64) Lease {
		t.Helper()
		r, err := e.m.Lease("d", LeaseRequest{Worker: w, Max: 1, ID: client<<32 | 1}, e.now)
		if err != nil || len(r.Shards) != 1 {
			t.Fatalf("client %d: %+v, %v", client, r, err)
		}
		e.check()
		return r.Shards[0]
	}
	first := make([]Lease, MaxClients)
	for c := range uint64(MaxClients) {
		first[c] = lease(c)
	}
	if l := lease(0); l.ID != first[0].ID { // client 0 is now the most recently used
		t.Fatalf("repeat of client 0: lease %d, want %d", l.ID, first[0].ID)
	}
	lease(MaxClients) // one too many: client 1 is forgotten
	if l := lease(1); l.ID == first[1].ID {
		t.Fatalf("client 1 was remembered past %d clients", MaxClients)
	}
	if l := lease(0); l.ID != first[0].ID {
		t.Fatalf("client 0 was forgotten: lease %d, want %d", l.ID, first[0].ID)
	}
}

// TestRestoreSchema1 reads a state written before incarnations: its
// workers are incarnation 0, and it writes back as the current schema.
func TestRestoreSchema1(t *testing.T) {
	e := newEnv(t, leased("d", 20, 4))
	e.lease("d", "a/0", 2)
	e.lease("d", "b/0", 1)
	v2, _ := e.m.MarshalState()
	v1 := strings.Replace(string(v2), `"schema":3,"workers":[{"name":"a/0"},{"name":"b/0"}],`, `"schema":1,`, 1)
	if v1 == string(v2) {
		t.Fatalf("no workers to strip in %s", v2)
	}
	m, err := Restore([]byte(v1))
	if err != nil {
		t.Fatalf("Restore of schema 1: %v\n%s", err, v1)
	}
	checkInvariants(t, m)
	cmpMachines(t, e.m, m)
	if _, err := m.Lease("d", LeaseRequest{Worker: wk("a/0", 1), Max: 1}, e.now); err != nil {
		t.Fatal(err)
	}
	if s, _ := m.Status("d"); s.Doing != 2 || s.Todo != 3 {
		t.Fatalf("after a/0's next incarnation: %d doing, %d todo; want 2 and 3", s.Doing, s.Todo)
	}
}

func TestRestoreRejectsWorkers(t *testing.T) {
	e := newEnv(t, leased("d", 20, 4), Dataset{Name: "s", Size: 10, BatchSize: 1, Mode: Sync})
	e.m.Fence(2, e.now)
	e.play([]call{
		{kind: "lease", ds: "d", w: wk("a/0", 2), max: 2, req: 1<<32 | 3, spans: [][2]int64{{0, 4}, {4, 8}}},
		{kind: "lease", ds: "d", w: wk("b/0", 3), max: 1, req: 5, spans: [][2]int64{{8, 12}}},
	})
	good, _ := e.m.MarshalState()
	want := `{"schema":3,"fence":2,"workers":[{"name":"a/0","incarnation":2,"requests":[{"dataset":"d","id":4294967299,"leases":[1,2]}]},{"name":"b/0","incarnation":3,"requests":[{"dataset":"d","id":5,"leases":[3]}]}],"datasets":[`
	if !strings.HasPrefix(string(good), want) {
		t.Fatalf("state\n%s\ndoes not start with\n%s", good, want)
	}
	if _, err := Restore(good); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, old, new, wantInMsg string }{
		{"negative fence", `"fence":2`, `"fence":-1`, "fence"},
		{"worker below the fence", `"fence":2`, `"fence":3`, "below the fence"},
		{"unsorted workers", `"name":"b/0"`, `"name":"a/0"`, "sorted"},
		{"empty worker name", `"name":"b/0"`, `"name":""`, "worker name"},
		{"unlisted holder", `{"name":"b/0","incarnation":3,"requests":[{"dataset":"d","id":5,"leases":[3]}]}`, `{"name":"c/0","incarnation":3}`, "not listed"},
		{"request for an unknown dataset", `"dataset":"d","id":5`, `"dataset":"x","id":5`, "Leased"},
		{"request for a Sync dataset", `"dataset":"d","id":5`, `"dataset":"s","id":5`, "Leased"},
		{"request ID 0", `"id":5`, `"id":0`, "ID 0"},
		{"two requests of a client", `"requests":[{"dataset":"d","id":5,"leases":[3]}]`, `"requests":[{"dataset":"d","id":5},{"dataset":"d","id":6}]`, "two requests"},
		{"leases not ascending", `"leases":[1,2]`, `"leases":[2,1]`, "ascending"},
		{"lease not issued", `"leases":[3]`, `"leases":[9]`, "ascending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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
