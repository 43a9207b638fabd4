package nodemanager

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPersistReplay(t *testing.T) {
	// Save after every step of a busy scenario, restore, and check that the
	// restored manager answers the rest exactly like the original, and that
	// replaying the same inputs on a fresh manager gives the same commands.
	sp := Spec{Job: "train", Groups: []GroupSpec{workers(1, 3)}, PendingTimeout: time.Minute}
	steps := []step{
		start(), running("train-worker-0-0", "h1"), running("train-worker-1-0", "h2"),
		act(Action{Kind: MarkHostBad, Host: "h2"}),
		exit("train-worker-1-0", 1).after(10 * time.Second), oom("train-worker-0-0").after(20 * time.Second),
		act(Action{Kind: RelaunchWithMoreMemory, NodeID: "train-worker-0-1", MemoryBytes: 1 << 30}),
		tick().after(time.Minute), exit("train-worker-2-0", 0).after(2 * time.Minute),
		lost("train-worker-1-1").after(3 * time.Minute), evicted("train-worker-0-2").after(4 * time.Minute),
	}
	want := run(t, mustNew(t, sp), steps)
	if again := run(t, mustNew(t, sp), steps); !cmp.Equal(want, again) {
		t.Fatalf("replay differs:\n%s", cmp.Diff(want, again))
	}
	for cut := 0; cut <= len(steps); cut++ {
		orig := mustNew(t, sp)
		head := run(t, orig, steps[:cut])
		data, err := orig.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		restored, err := Restore(data)
		if err != nil {
			t.Fatalf("cut %d: %v\n%s", cut, err, data)
		}
		if diff := cmp.Diff(orig.Status(), restored.Status()); diff != "" {
			t.Fatalf("cut %d: status (-orig +restored):\n%s", cut, diff)
		}
		tail := run(t, restored, steps[cut:])
		if diff := cmp.Diff(want, append(head, tail...)); diff != "" {
			t.Fatalf("cut %d: commands (-uninterrupted +restored):\n%s", cut, diff)
		}
	}
}

func TestRestoreRejects(t *testing.T) {
	m := mustNew(t, spec(workers(1, 2)))
	run(t, m, []step{start(), exit("train-worker-0-0", 1)})
	good, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, from, to string }{
		{"schema", `"schema":2`, `"schema":3`},
		{"desired over max", `"desired":[2]`, `"desired":[3]`},
		{"desired count", `"desired":[2]`, `"desired":[2,2]`},
		{"live above desired", `"desired":[2]`, `"desired":[1]`},
		{"rescaled over relaunch", `"relaunch":1`, `"relaunch":1,"rescaled":2`},
		{"rank over max", `"held":true,"reason":"start worker rank 1 of 2"}`, `"held":true,"reason":"start worker rank 1 of 2"},{"group":0,"rank":2,"relaunch":0,"state":5,"since":"2026-01-01T00:00:00Z"}`},
		{"unknown field", `"started":true`, `"started":true,"extra":1`},
		{"relaunch count", `"relaunches":1`, `"relaunches":2`},
		{"not retired", `"retired":["train-worker-0-0"]`, `"retired":[]`},
		{"over budget", `"relaunch":1`, `"relaunch":9`},
		{"bad spec", `"max_nodes":2`, `"max_nodes":0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(string(good), tc.from, tc.to, 1)
			if data == string(good) {
				t.Fatalf("%q not in %s", tc.from, good)
			}
			if _, err := Restore([]byte(data)); !errors.Is(err, ErrBadState) && !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Restore = %v, want ErrBadState", err)
			}
		})
	}
}
