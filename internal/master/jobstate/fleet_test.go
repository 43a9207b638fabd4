package jobstate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/nodemanager"
)

// TestDiagnosisNotices: a diagnosis that relaunches its root's node on a
// bad host marks the host first; one that fails fast, or whose root node
// is not among the failures, asks nothing of the node manager.
func TestDiagnosisNotices(t *testing.T) {
	fs := []Failure{{NodeID: "a", NodeRank: 0, Host: "h0"}, {NodeID: "b", NodeRank: 1, Host: "h1"}}
	d := diagnosis.Decision{Action: diagnosis.RelaunchNode, MarkHostBad: true, Reason: "Xid 79", Root: diagnosis.Failure{NodeRank: 1}}
	want := []FleetNotice{
		{Node: "b", Reason: "Xid 79", Action: nodemanager.Action{Kind: nodemanager.MarkHostBad, Host: "h1", Reason: "Xid 79"}},
		{Node: "b", Reason: "Xid 79", Action: nodemanager.Action{Kind: nodemanager.RelaunchNode, NodeID: "b", Reason: "Xid 79"}},
	}
	if diff := cmp.Diff(want, DiagnosisNotices(d, fs)); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	more := diagnosis.Decision{Action: diagnosis.RelaunchWithMoreMemory, Memory: 16 << 30, Reason: "oom", Root: diagnosis.Failure{NodeRank: 0}}
	if got := DiagnosisNotices(more, fs); len(got) != 1 || got[0].Action.Kind != nodemanager.RelaunchWithMoreMemory || got[0].Action.MemoryBytes != 16<<30 {
		t.Errorf("more memory: %+v", got)
	}
	d.FailFast = true
	if got := DiagnosisNotices(d, fs); got != nil {
		t.Errorf("fail fast: %+v, want none", got)
	}
	if got := DiagnosisNotices(diagnosis.Decision{Action: diagnosis.RelaunchNode, Root: diagnosis.Failure{NodeRank: 7}}, fs); got != nil {
		t.Errorf("a root on no failure's node: %+v, want none", got)
	}
}

// TestFleetSave: the manager's state is kept; the nodes it runs change only
// when it names some; notices queue until taken.
func TestFleetSave(t *testing.T) {
	f := NewFleet()
	if !f.Save([]byte(`{"a":1}`), 3) || f.Expect() != 3 {
		t.Errorf("a save with 3 nodes: expect %d", f.Expect())
	}
	if f.Save([]byte(`{"a":2}`), 0) || f.Expect() != 3 || string(f.Saved()) != `{"a":2}` {
		t.Errorf("a save without nodes: expect %d, saved %s", f.Expect(), f.Saved())
	}
	f.Notice(FleetNotice{Lost: true, Node: "a"})
	if got := f.TakeNotices(); len(got) != 1 || !got[0].Lost || len(f.TakeNotices()) != 0 {
		t.Errorf("notices %+v, want the one, once", got)
	}
}
