package agent

import (
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"google.golang.org/protobuf/proto"
)

func kinds(events []*roverv1.NodeEvent) []roverv1.NodeEventKind {
	out := make([]roverv1.NodeEventKind, len(events))
	for i, e := range events {
		out[i] = e.GetKind()
	}
	return out
}

// TestEventQueue checks the queue's order, its bound (the oldest dropped and
// counted), take's limit, putBack's order, and that queued events signal.
func TestEventQueue(t *testing.T) {
	q := newEventQueue(4)
	if q.take(64) != nil {
		t.Fatal("an empty queue has events")
	}
	select {
	case <-q.ready:
		t.Fatal("an empty queue is ready")
	default:
	}
	for step := range int64(6) {
		q.add(&roverv1.NodeEvent{Step: step})
	}
	if q.droppedCount() != 2 {
		t.Errorf("dropped %d, want 2", q.droppedCount())
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("queued events did not signal")
	}
	got := q.take(3)
	if len(got) != 3 || got[0].GetStep() != 2 || got[2].GetStep() != 4 {
		t.Fatalf("take(3): %v, want steps 2, 3, 4 (the oldest two dropped)", got)
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("an event left behind does not keep the queue ready")
	}
	q.add(&roverv1.NodeEvent{Step: 6})
	q.putBack(got) // a failed send: back in front, oldest dropped past the bound
	rest := q.take(64)
	var steps []int64
	for _, e := range rest {
		steps = append(steps, e.GetStep())
	}
	if want := []int64{3, 4, 5, 6}; len(steps) != len(want) || steps[0] != 3 || steps[3] != 6 {
		t.Fatalf("after putBack: steps %v, want %v", steps, want)
	}
	if q.droppedCount() != 3 {
		t.Errorf("dropped %d, want 3", q.droppedCount())
	}
}

// TestEventQueueUrgency: a checkpoint save waits for a beat (no ready
// signal); the workers' start and restore moments signal at once.
func TestEventQueueUrgency(t *testing.T) {
	q := newEventQueue(eventQueueLimit)
	q.add(&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED})
	select {
	case <-q.ready:
		t.Fatal("a checkpoint save asked for a heartbeat at once")
	default:
	}
	if !q.pending() {
		t.Fatal("the save is not pending")
	}
	for _, k := range []roverv1.NodeEventKind{roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED,
		roverv1.NodeEventKind_NODE_EVENT_KIND_RESTORE_STARTED, roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED} {
		q.add(&roverv1.NodeEvent{Kind: k})
		select {
		case <-q.ready:
		default:
			t.Fatalf("%s did not ask for a heartbeat at once", k)
		}
	}
	if got := kinds(q.take(64)); len(got) != 4 || got[0] != roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED {
		t.Fatalf("events %v, want the save first, then the three others", got)
	}
	if q.pending() {
		t.Fatal("events pending after all were taken")
	}
}

// TestEventQueueTakeLimit checks that a long queue goes out in beats of at
// most maxEventsPerBeat.
func TestEventQueueTakeLimit(t *testing.T) {
	q := newEventQueue(eventQueueLimit)
	for range 150 {
		q.add(&roverv1.NodeEvent{})
	}
	for i, want := range []int{64, 64, 22, 0} {
		if got := len(q.take(maxEventsPerBeat)); got != want {
			t.Fatalf("beat %d: %d events, want %d", i, got, want)
		}
	}
}

// fakeNanos is a scripted clock for lifecycle.
type fakeNanos struct{ t int64 }

func (c *fakeNanos) now() int64 { c.t += 10; return c.t }

// TestLifecycleFetchedRestore: a round whose step the agent fetched from
// its backup peer (or a peer) before the workers started resumes from
// BACKUP (PEER), with the fetch's peer and duration and the workers' load
// time; a round whose workers loaded another step, or from storage, says
// so, without the fetch.
func TestLifecycleFetchedRestore(t *testing.T) {
	mem, sto := roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, roverv1.CheckpointSource_CHECKPOINT_SOURCE_STORAGE
	backup := roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP
	for _, tc := range []struct {
		name       string
		fetchRound int64
		loaded     [2]roverv1.CheckpointSource
		step       int64
		want       roverv1.CheckpointSource
		wantPeer   string
	}{
		{"fetched, loaded from memory", 4, [2]roverv1.CheckpointSource{mem, mem}, 25, backup, "node-a"},
		{"a rank fell back to storage", 4, [2]roverv1.CheckpointSource{mem, sto}, 25, sto, ""},
		{"another step loaded", 4, [2]roverv1.CheckpointSource{mem, mem}, 24, mem, ""},
		{"fetched for an older round", 3, [2]roverv1.CheckpointSource{mem, mem}, 25, mem, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, clk := newEventQueue(eventQueueLimit), &fakeNanos{}
			l := newLifecycle(q, clk.now)
			l.fetched(tc.fetchRound, 25, backup, "node-a", 2*time.Second)
			l.workersStarted(4, 2)
			l.restoreStarted(4, 2)
			l.restoreFinished(4, 2, 0, tc.step, tc.loaded[0])
			l.restoreFinished(4, 2, 1, tc.step, tc.loaded[1])
			got := q.take(64)
			if len(got) != 3 {
				t.Fatalf("events %v, want WORKERS_STARTED, RESTORE_STARTED, RESUMED", got)
			}
			r := got[2]
			if r.GetSource() != tc.want || r.GetPeer() != tc.wantPeer || r.GetStep() != tc.step {
				t.Fatalf("RESUMED %v, want step %d from %v (peer %q)", r, tc.step, tc.want, tc.wantPeer)
			}
			if wantFetch := map[bool]int64{true: int64(2 * time.Second)}[tc.wantPeer != ""]; r.GetFetchNanos() != wantFetch {
				t.Errorf("fetch_nanos %d, want %d", r.GetFetchNanos(), wantFetch)
			}
			if want := r.GetTimeUnixNanos() - got[1].GetTimeUnixNanos(); r.GetLoadNanos() != want || want <= 0 {
				t.Errorf("load_nanos %d, want %d: from RESTORE_STARTED to RESUMED", r.GetLoadNanos(), want)
			}
		})
	}
}

// TestLifecycleRestore: a round's events wait for its WORKERS_STARTED;
// RESTORE_STARTED once; RESUMED once every local worker finished, at the
// lowest step (storage over memory at the same step); reports of an older
// round and repeated reports are dropped.
func TestLifecycleRestore(t *testing.T) {
	q, clk := newEventQueue(eventQueueLimit), &fakeNanos{}
	l := newLifecycle(q, clk.now)
	mem, sto := roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, roverv1.CheckpointSource_CHECKPOINT_SOURCE_STORAGE
	l.restoreStarted(2, 3) // before the last worker was spawned
	l.restoreFinished(2, 3, 0, 40, mem)
	if got := q.take(64); got != nil {
		t.Fatalf("events before WORKERS_STARTED went out: %v", got)
	}
	l.workersStarted(2, 3)
	l.restoreStarted(2, 3)
	l.restoreFinished(2, 3, 0, 10, mem) // a second report of local rank 0: ignored
	l.restoreFinished(2, 3, 1, 30, sto)
	l.restoreFinished(1, 3, 2, 5, mem) // an older round's
	if got := kinds(q.take(64)); len(got) != 2 || got[0] != roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED ||
		got[1] != roverv1.NodeEventKind_NODE_EVENT_KIND_RESTORE_STARTED {
		t.Fatalf("events: %v, want WORKERS_STARTED, RESTORE_STARTED", got)
	}
	l.restoreFinished(2, 3, 2, 30, mem)
	got := q.take(64)
	if len(got) != 1 || got[0].GetKind() != roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED || got[0].GetStep() != 30 ||
		got[0].GetSource() != sto || got[0].GetRound() != 2 {
		t.Fatalf("events: %v, want RESUMED of round 2 at step 30 from storage", got)
	}
	l.restoreFinished(2, 3, 2, 30, mem)
	l.restoreStarted(2, 3)
	if got := q.take(64); got != nil {
		t.Fatalf("a resumed round reported again: %v", got)
	}
	// A new round starts afresh; a worker that loaded nothing resumes at -1.
	l.workersStarted(3, 1)
	l.restoreFinished(3, 1, 0, 99, roverv1.CheckpointSource_CHECKPOINT_SOURCE_NONE)
	got = q.take(64)
	if len(got) != 2 || got[1].GetStep() != -1 || got[1].GetSource() != roverv1.CheckpointSource_CHECKPOINT_SOURCE_NONE {
		t.Fatalf("events: %v, want WORKERS_STARTED and RESUMED at -1 from nothing", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].GetTimeUnixNanos() <= got[i-1].GetTimeUnixNanos() {
			t.Errorf("event times do not increase: %v", got)
		}
	}
}

// TestLifecycleSaves: one CHECKPOINT_SAVED per step once the node's savers
// committed it, with the longest blocking; a saver moving on reports the
// step it left; the round's end reports what is pending; a durable event
// follows once every rank that committed the step made it durable, and
// never before the step's save.
func TestLifecycleSaves(t *testing.T) {
	q, clk := newEventQueue(eventQueueLimit), &fakeNanos{}
	l := newLifecycle(q, clk.now)
	l.workersStarted(1, 2)
	q.take(64)
	ms := int64(time.Millisecond)
	l.saved(1, 2, 0, 4, 3*ms, 2, true)
	l.durable(0, 4, 1) // rank 0's file is durable before rank 1 committed
	if got := q.take(64); got != nil {
		t.Fatalf("a step half committed went out: %v", got)
	}
	l.saved(1, 2, 1, 4, 7*ms, 2, true)
	got := q.take(64)
	if len(got) != 1 || got[0].GetStep() != 4 || got[0].GetBlockingNanos() != 7*ms || got[0].GetDurable() {
		t.Fatalf("events: %v, want step 4's save blocking 7ms", got)
	}
	l.durable(1, 4, 1)
	got = q.take(64)
	if len(got) != 1 || !got[0].GetDurable() || got[0].GetStep() != 4 || got[0].GetBlockingNanos() != 0 || got[0].GetRound() != 1 {
		t.Fatalf("events: %v, want step 4 durable", got)
	}
	l.durable(1, 4, 1)
	l.saved(1, 2, 1, 4, 9*ms, 2, true) // late: step 4 went out
	if got := q.take(64); got != nil {
		t.Fatalf("a step reported twice: %v", got)
	}
	// Replicated: one saver a step.
	l.saved(1, 2, 0, 6, 2*ms, 1, false)
	if got := q.take(64); len(got) != 1 || got[0].GetStep() != 6 {
		t.Fatalf("events: %v, want step 6 from its one saver", got)
	}
	// A saver moving on to step 10 reports step 8, which the other skipped.
	l.saved(1, 2, 0, 8, ms, 2, false)
	l.saved(1, 2, 0, 10, ms, 2, false)
	if got := q.take(64); len(got) != 1 || got[0].GetStep() != 8 {
		t.Fatalf("events: %v, want step 8", got)
	}
	l.groupEnded(1, lastStep{})
	if got := q.take(64); len(got) != 1 || got[0].GetStep() != 10 {
		t.Fatalf("events at the group's end: %v, want step 10", got)
	}
	// Persisted after the round ended (the files of a failed round).
	l.workersStarted(2, 2)
	q.take(64)
	l.durable(0, 10, 1) // committed without a location: not tracked
	if got := q.take(64); got != nil {
		t.Fatalf("a step committed without storage went durable: %v", got)
	}
}

// TestLifecycleSavesBounded: pending saves are bounded.
func TestLifecycleSavesBounded(t *testing.T) {
	q, clk := newEventQueue(eventQueueLimit), &fakeNanos{}
	l := newLifecycle(q, clk.now)
	l.workersStarted(1, 2)
	q.take(64)
	for step := range int64(100) {
		l.saved(1, 2, int32(step%2), step*2+int64(step%2), 0, 2, true) // never both ranks at one step
	}
	if len(l.saves) > maxPendingSaves || len(l.committed) > maxCommitRecords {
		t.Fatalf("%d pending saves and %d commit records, want at most %d and %d", len(l.saves), len(l.committed), maxPendingSaves, maxCommitRecords)
	}
}

// FuzzLifecycle plays random worker reports (rounds going back, repeated and
// out-of-order reports, durable files of any step) and checks what goes out:
// per round at most one WORKERS_STARTED, RESTORE_STARTED and RESUMED, the
// WORKERS_STARTED first (unless it never came: the round's events go out
// when a newer round begins); no round goes back; a step's save once, and its
// durable save once and after it; the pending state stays bounded.
func FuzzLifecycle(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{10, 3, 3, 3, 20, 4, 4, 36, 36, 52, 5, 0, 1, 2})
	f.Add([]byte{255, 254, 253, 3, 19, 35, 51, 67, 83, 99, 115, 131})
	f.Fuzz(func(t *testing.T, ops []byte) {
		q, clk := newEventQueue(1<<20), &fakeNanos{}
		l := newLifecycle(q, clk.now)
		round := int64(1)
		for i, op := range ops {
			local, step := int32(op>>4)%3, int64(op>>4)
			switch op % 8 {
			case 0:
				round++
			case 1:
				round = max(1, round-1) // an older round's report
			case 2:
				l.workersStarted(round, 3)
			case 3:
				l.restoreStarted(round, 3)
			case 4:
				l.restoreFinished(round, 3, local, step-1, roverv1.CheckpointSource(1+op%3))
			case 5:
				l.saved(round, 3, local, step, int64(i), int(op%4), op&8 != 0)
			case 6:
				l.durable(int(local), step, int(round))
			case 7:
				l.groupEnded(round, lastStep{})
			}
			if len(l.saves) > maxPendingSaves || len(l.committed) > maxCommitRecords {
				t.Fatalf("unbounded: %d pending saves, %d commit records", len(l.saves), len(l.committed))
			}
		}
		type key struct {
			round int64
			kind  roverv1.NodeEventKind
			step  int64
		}
		seen, early := map[key]bool{}, map[int64]bool{}
		lastRound := int64(-1)
		for _, e := range q.take(1 << 20) {
			k := key{e.GetRound(), e.GetKind(), 0}
			if e.GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED {
				k.step = e.GetStep()
				if e.GetDurable() {
					if !seen[k] {
						t.Fatalf("step %d of round %d durable before its save", k.step, k.round)
					}
					k.kind = -1
				}
			}
			if k.kind == roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED && early[k.round] {
				t.Fatalf("round %d's events went out before its WORKERS_STARTED", k.round)
			} else if k.kind != roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED && !seen[key{k.round, roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, 0}] {
				early[k.round] = true // only a round that never started every worker
			}
			if seen[k] {
				t.Fatalf("%v went out twice", e)
			}
			seen[k] = true
			if !e.GetDurable() {
				if e.GetRound() < lastRound {
					t.Fatalf("round %d's event after round %d's", e.GetRound(), lastRound)
				}
				lastRound = e.GetRound()
			}
		}
	})
}

// TestLifecycleResend: on a new session the current round's milestones that
// went out are queued again, in front, with their own times; saves are
// not, nor what still waits for WORKERS_STARTED, nor an older round's.
func TestLifecycleResend(t *testing.T) {
	q, clk := newEventQueue(eventQueueLimit), &fakeNanos{}
	l := newLifecycle(q, clk.now)
	mem := roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY
	l.workersStarted(1, 1)
	l.restoreFinished(1, 1, 0, 5, mem)
	q.take(64)
	l.workersStarted(2, 1)
	l.restoreStarted(2, 1)
	l.restoreFinished(2, 1, 0, 40, mem)
	l.saved(2, 1, 0, 42, 1000, 1, false)
	sent := q.take(64)
	if len(sent) != 4 {
		t.Fatalf("round 2 sent %v, want its start, restore, resume and a save", kinds(sent))
	}
	q.add(&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED, Step: 44})
	l.resend()
	got := q.take(64)
	want := []roverv1.NodeEventKind{roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, roverv1.NodeEventKind_NODE_EVENT_KIND_RESTORE_STARTED,
		roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED, roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED}
	if k := kinds(got); len(k) != len(want) || k[0] != want[0] || k[1] != want[1] || k[2] != want[2] || k[3] != want[3] {
		t.Fatalf("after resend: %v, want %v (the waiting save last)", k, want)
	}
	for i := range 3 {
		if !proto.Equal(got[i], sent[i]) || got[i] == sent[i] {
			t.Errorf("resent %v, want a copy of %v", got[i], sent[i])
		}
	}
	// A round whose workers are not all started has sent nothing yet.
	l.restoreStarted(3, 2)
	l.resend()
	if got := q.take(64); got != nil {
		t.Errorf("resend before round 3's WORKERS_STARTED: %v", kinds(got))
	}
}

// TestLifecycleGroupEndSendsSavesAtOnce: a save waits for a beat, but
// once the group ended what waits goes out at once (the master's last
// word on the workers' steps, before their outcome).
func TestLifecycleGroupEndSendsSavesAtOnce(t *testing.T) {
	q, clk := newEventQueue(eventQueueLimit), &fakeNanos{}
	l := newLifecycle(q, clk.now)
	l.workersStarted(1, 1)
	q.take(64)
	<-q.ready // WORKERS_STARTED's signal
	l.saved(1, 1, 0, 10, 1000, 1, false)
	select {
	case <-q.ready:
		t.Fatal("a save signalled the queue")
	default:
	}
	l.groupEnded(1, lastStep{})
	select {
	case <-q.ready:
	default:
		t.Fatal("the group's end did not send its waiting save at once")
	}
	if got := q.take(64); len(got) != 1 || got[0].GetStep() != 10 {
		t.Errorf("events %v, want the save of step 10", got)
	}
}
