package jobstate

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/rendezvous"
)

// TestFailureRecord: a round's reports are annotated with its diagnosis; a
// lost node takes the blame for the others' failures in the world it
// ended; the record keeps the last MaxFailuresKept.
func TestFailureRecord(t *testing.T) {
	fs := NewFailures()
	d := fs.Record(1, []Failure{{NodeID: "a", Round: 1, ExitCode: 1, Message: "ValueError: bad"}}, diagnosis.Caps{})
	if got := fs.Records(); len(got) != 1 || got[0].Cause != d.Cause.String() || got[0].Action != d.ActionName() || got[0].Diagnosis != d.Reason {
		t.Fatalf("records %+v, want the one annotated with %+v", got, d)
	}
	if fs.History().Len() != 1 {
		t.Errorf("history has %d entries, want 1", fs.History().Len())
	}
	fs.Record(2, []Failure{{NodeID: "a", Round: 2, ExitCode: 1}, {NodeID: "b", Round: 2, ExitCode: 1}}, diagnosis.Caps{})
	fs.Blame(Loss{Node: "b", Member: rendezvous.Member{NodeID: "b", NodeRank: 1, Addr: "h1", RankOffset: 2}, Round: 2,
		Reason: "OOMKilled", Time: time.Unix(5, 0)})
	var got []string
	for _, f := range fs.Records() {
		got = append(got, fmt.Sprintf("%s@%d:%s/%s", f.NodeID, f.Round, f.Cause, f.Action))
	}
	want := []string{"a@1:user-error/restart-in-place", "b@2:" + d.Cause.String() + "/" + d.Action.String(), "b@2:out-of-memory/re-form-world"}
	if !cmp.Equal(got, want) {
		t.Errorf("after b's loss: %v, want %v (a's failure in round 2 dropped)", got, want)
	}
	last := fs.Records()[2]
	if last.Host != "h1" || last.Rank != 2 || last.NodeRank != 1 || last.ExitCode != -1 || last.TimeUnixNanos != time.Unix(5, 0).UnixNano() {
		t.Errorf("the loss's record %+v", last)
	}
	for i := range MaxFailuresKept + 5 {
		fs.Record(10+i, []Failure{{NodeID: "a", Round: int64(10 + i), ExitCode: 1}}, diagnosis.Caps{})
	}
	if n := len(fs.Records()); n != MaxFailuresKept || fs.Records()[n-1].Round != int64(10+MaxFailuresKept+4) {
		t.Errorf("%d records kept, the last of round %d; want %d, the newest last", n, fs.Records()[n-1].Round, MaxFailuresKept)
	}
}
