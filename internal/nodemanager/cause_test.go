package nodemanager

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/platform"
)

const node0 = "train-worker-0-0"

func TestRelaunchCauses(t *testing.T) {
	// Every way a node is relaunched lands in its one cause.
	for _, c := range []struct {
		name string
		in   step
		want RelaunchCause
	}{
		{"OOMKilled exit", oom(node0), CauseOOM},
		{"failed exit", exit(node0, 1), CauseExited},
		{"signal exit", event(platform.Event{NodeID: node0, Kind: platform.Exited, ExitCode: 143, Signal: 15}), CauseExited},
		{"deadline exceeded", event(platform.Event{NodeID: node0, Kind: platform.Exited, ExitCode: 137, Reason: "DeadlineExceeded"}), CauseExited},
		{"create refused", event(platform.Event{NodeID: node0, Kind: platform.Exited, ExitCode: 127, Reason: "the platform could not create it: quota"}), CauseExited},
		{"evicted pod", evicted(node0), CauseEvicted},
		{"preempted exit", event(platform.Event{NodeID: node0, Kind: platform.Exited, ExitCode: 137, Reason: "Preempted"}), CauseEvicted},
		{"deleted pod", event(platform.Event{NodeID: node0, Kind: platform.Deleted}), CauseDeleted},
		{"heartbeat lost", lost(node0), CauseNodeLost},
		{"node check", act(Action{Kind: RelaunchNode, NodeID: node0, Reason: "the node check found it faulty", Cause: CauseNodeCheck}), CauseNodeCheck},
		{"diagnosis", act(Action{Kind: RelaunchNode, NodeID: node0, Reason: "NCCL hardware fault"}), CauseDiagnosis},
		{"diagnosed OOM", act(Action{Kind: RelaunchWithMoreMemory, NodeID: node0, MemoryBytes: 1 << 40, Reason: "out of memory"}), CauseOOM},
		{"unknown cause", act(Action{Kind: RelaunchNode, NodeID: node0, Reason: "x", Cause: "a free string"}), CauseDiagnosis},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := mustNew(t, spec(workers(1, 1)))
			cmds := run(t, m, []step{start(), running(node0, "h1"), c.in})
			if last := cmds[len(cmds)-1]; last.Kind != CreateNode || last.Cause != c.want || cmds[0].Cause != "" {
				t.Errorf("commands %v: want the start's create without a cause, the relaunch's with %q", cmds, c.want)
			}
			st := m.Status()
			if want := map[RelaunchCause]int{c.want: 1}; !cmp.Equal(st.RelaunchCauses, want) || st.Relaunches != 1 {
				t.Fatalf("relaunches %d by cause %v, want 1 by %v", st.Relaunches, st.RelaunchCauses, want)
			}
		})
	}
}

func TestRelaunchCausesCountOnlyRelaunches(t *testing.T) {
	// A node that ends past its budget is not relaunched: no cause counts it.
	g := workers(1, 2)
	g.RestartCount = 1
	m := mustNew(t, spec(g))
	run(t, m, []step{start(), running(node0, "h1"), oom(node0), lost("train-worker-0-1").then("Delete train-worker-0-1")})
	if st := m.Status(); st.Relaunches != 1 || !cmp.Equal(st.RelaunchCauses, map[RelaunchCause]int{CauseOOM: 1}) {
		t.Fatalf("relaunches %d by cause %v, want 1 oom", st.Relaunches, st.RelaunchCauses)
	}
	if st := mustNew(t, spec(g)).Status(); st.RelaunchCauses != nil {
		t.Fatalf("a new manager has causes %v", st.RelaunchCauses)
	}
}

func TestRelaunchCausesSurviveRestore(t *testing.T) {
	m := mustNew(t, spec(workers(1, 2)))
	run(t, m, []step{start(), running(node0, "h1"), oom(node0), lost("train-worker-1-0"), exit("train-worker-0-1", 2)})
	want := map[RelaunchCause]int{CauseOOM: 1, CauseNodeLost: 1, CauseExited: 1}
	data, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Status().RelaunchCauses; !cmp.Equal(got, want) {
		t.Fatalf("restored causes %v, want %v", got, want)
	}
	// It goes on counting where it left off.
	run(t, restored, []step{lost("train-worker-0-2")})
	want[CauseNodeLost]++
	if got := restored.Status().RelaunchCauses; !cmp.Equal(got, want) {
		t.Fatalf("causes after a restore and a loss %v, want %v", got, want)
	}

	// A state saved before causes were kept counts its relaunches as other.
	field := `,"relaunch_causes":{"exited":1,"node_lost":1,"oom":1}`
	if !strings.Contains(string(data), field) {
		t.Fatalf("state %s lacks %s", data, field)
	}
	old, err := Restore([]byte(strings.Replace(string(data), field, "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := old.Status().RelaunchCauses; !cmp.Equal(got, map[RelaunchCause]int{CauseOther: 3}) {
		t.Fatalf("causes of an old state %v, want 3 other", got)
	}

	for _, bad := range []string{
		`,"relaunch_causes":{"exited":1,"node_lost":1,"oom":2}`,    // sum 4, relaunches 3
		`,"relaunch_causes":{"exited":1,"node_lost":1,"cosmic":1}`, // unknown cause
		`,"relaunch_causes":{"exited":3,"node_lost":0}`,            // a zero count
		`,"relaunch_causes":{}`,                                    // none for 3 relaunches
	} {
		_, err := Restore([]byte(strings.Replace(string(data), field, bad, 1)))
		if !errors.Is(err, ErrBadState) {
			t.Errorf("restore with %s: err %v, want ErrBadState", bad, err)
		}
	}
}
