package master

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/rendezvous"
	"google.golang.org/protobuf/encoding/protojson"
)

// The core's record of a job's failures: what each failed round's reports
// say, annotated with their diagnosis, and the blame a lost node takes for
// the failures its loss caused.

// blameLossLocked records that a lost node ended its world's round: the
// failures the other members reported for that round were the loss's
// consequences (their collectives broke), so they are dropped, and the lost
// node is named instead.
func (c *core) blameLossLocked(e *event, mb rendezvous.Member, round int) {
	c.failures = slices.DeleteFunc(c.failures, func(f *roverv1.WorkerFailure) bool {
		return f.GetRound() == int64(round) && f.GetNodeId() != e.Node
	})
	msg := fmt.Sprintf("node %s (node rank %d) was lost: %s", e.Node, mb.NodeRank, cmp.Or(e.Reason, "its agent is gone"))
	f := &roverv1.WorkerFailure{
		NodeId: e.Node, NodeRank: int32(mb.NodeRank), Host: mb.Addr, Rank: int32(mb.RankOffset),
		ExitCode: -1, TimeUnixNanos: e.Time.UnixNano(), Round: int64(round), Message: msg,
		Cause: lossCause(e.Reason).String(), Action: "re-form-world",
		Diagnosis: msg + "; its world ends, and the others restart in a new round without spending a restart",
	}
	if c.fleetOn {
		f.Action = diagnosis.RelaunchNode.String()
		f.Diagnosis = msg + "; the node manager relaunches it while its relaunch budget lasts, and the others restart in a new round without spending a restart"
	}
	c.failures = append(c.failures, f)
	if n := len(c.failures); n > maxFailuresKept {
		c.failures = append([]*roverv1.WorkerFailure(nil), c.failures[n-maxFailuresKept:]...)
	}
}

// lossCause classifies why a node was lost, from the words of its reason.
func lossCause(reason string) diagnosis.Cause {
	switch {
	case strings.Contains(reason, "Evicted"), strings.Contains(reason, "Preempted"):
		return diagnosis.Preempted
	case strings.Contains(reason, "OOMKilled"):
		return diagnosis.OutOfMemory
	case strings.Contains(reason, "signal"), strings.Contains(reason, "exited"):
		return diagnosis.Killed
	}
	return diagnosis.Unknown
}

// recordFailuresLocked keeps a report's failures, each annotated with the
// diagnosis of the round (internal/diagnosis): its cause, the action it
// calls for and why; it returns the diagnosis (FailFast: the job must fail
// now rather than restart). The diagnosis depends only on the reports and the
// history of earlier rounds' diagnoses, so a replay annotates alike.
func (c *core) recordFailuresLocked(round int, raw []json.RawMessage) (d diagnosis.Decision) {
	var fs []*roverv1.WorkerFailure
	for _, b := range raw {
		f := &roverv1.WorkerFailure{}
		if protojson.Unmarshal(b, f) == nil {
			fs = append(fs, f)
		}
	}
	if len(fs) > 0 {
		in := make([]diagnosis.Failure, len(fs))
		for i, f := range fs {
			in[i] = diagnosis.FromProto(f)
		}
		caps := c.caps
		if c.rdzv != nil {
			st := c.rdzv.Status()
			caps.NoRestartsLeft, caps.MaxRestarts = st.Restarts >= st.MaxRestarts, st.MaxRestarts
		}
		d = diagnosis.DecideRound(c.diag, in, caps)
		c.diag = c.diag.Record(int64(round), d)
		for _, f := range fs {
			f.Cause, f.Action, f.Diagnosis = d.Cause.String(), d.ActionName(), d.Reason
		}
		c.noticeDiagnosisLocked(d, fs)
	}
	c.failures = append(c.failures, fs...)
	if n := len(c.failures); n > maxFailuresKept {
		c.failures = append([]*roverv1.WorkerFailure(nil), c.failures[n-maxFailuresKept:]...)
	}
	return d
}
