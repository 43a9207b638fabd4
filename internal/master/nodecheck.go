package master

import (
	"fmt"
	"slices"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodecheck"
)

// The core's side of the pre-flight node check (internal/nodecheck,
// docs/design/node-check.md). When a round closes on a world with a node
// that has not passed a check, the check starts: the members' views carry
// their groups instead of their assignment, so no worker starts. The
// agents' reports (jobstate.EventCheckReport) and the stage deadline
// (jobstate.EventCheckTick) are journaled; the start, the stages and the
// verdicts follow from them and from the rendezvous's own events
// (jobstate.State.Apply), so a replay rebuilds the same check. Once it is over, the excluded nodes are lost to
// the rendezvous (a membership change that spends no restart; the others
// form a new world without them), and when the master owns the nodes the
// node manager relaunches each one, its host marked bad.

// checkViewLocked adds the node check to id's view: its groups while the
// check of its world runs (the assignment is held back), its verdict after.
func (c *core) checkViewLocked(id string, v *roverv1.NodeView) {
	if c.st.Check == nil {
		return
	}
	m := c.st.Check.Machine()
	world, stage, done, member, ok := m.Stage(id)
	verdict, judged := m.Verdict(id)
	if !ok || !member && !judged {
		return
	}
	nc := c.st.Members.Config().NodeCheck
	cv := &roverv1.NodeCheckView{Round: int64(world), Stage: int32(stage), Running: !done,
		GroupTimeoutMillis: nc.Config.Timeout().Milliseconds(), CommPerf: nc.CommPerf}
	if !done && member {
		v.Assignment = nil
		_, _, groups := m.Tasks(id)
		for _, g := range groups {
			cv.Groups = append(cv.Groups, &roverv1.NodeCheckGroup{Id: int32(g.ID), NodeIds: g.Nodes})
		}
	} else if judged {
		cv.Verdict = verdictProto(verdict)
	}
	v.NodeCheck = cv
}

// checkProtoLocked fills GetJob's node check.
func (c *core) checkProtoLocked(r *roverv1.GetJobResponse) {
	if c.st.Check == nil {
		return
	}
	m := c.st.Check.Machine()
	ch := m.Last()
	if ch == nil {
		return
	}
	st := &roverv1.NodeCheckStatus{Round: int64(ch.World), Stage: int32(ch.Stage), Running: !ch.Done, Cancelled: ch.Cancelled,
		StartedUnixNanos: unixNanos(ch.Started), EndedUnixNanos: unixNanos(ch.Ended), MedianMicros: ch.Median.Microseconds()}
	for _, v := range ch.Verdicts {
		st.Verdicts = append(st.Verdicts, verdictProto(v))
	}
	// Nodes excluded by earlier checks stay on record.
	for _, v := range m.Excluded() {
		if !slices.Contains(ch.Nodes, v.Node) {
			st.Verdicts = append(st.Verdicts, verdictProto(v))
		}
	}
	for _, rep := range ch.Reports {
		st.Reports = append(st.Reports, &roverv1.NodeCheckReport{Stage: int32(rep.Stage), Group: int32(rep.Group), NodeId: rep.Node, Result: resultProto(rep.Result)})
	}
	r.NodeCheck = st
}

func verdictProto(v nodecheck.Verdict) *roverv1.NodeCheckVerdict {
	return &roverv1.NodeCheckVerdict{NodeId: v.Node, Verdict: string(v.Kind), Excluded: v.Excluded, TimeMicros: v.Time.Microseconds(), Reason: v.Reason}
}

func resultProto(r nodecheck.Result) *roverv1.NodeCheckResult {
	return &roverv1.NodeCheckResult{Ok: r.OK, Local: r.Local, ElapsedMicros: r.Elapsed.Microseconds(),
		ComputeMicros: r.Compute.Microseconds(), CollectiveMicros: r.Collective.Microseconds(), LinkMicros: r.Link.Microseconds(),
		BandwidthBytesPerSec: r.Bandwidth, LatencyMicros: r.Latency.Microseconds(), Error: r.Error}
}

// resultFromProto converts and bounds a reported result.
func resultFromProto(p *roverv1.NodeCheckResult) (nodecheck.Result, error) {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	for _, v := range []int64{p.GetElapsedMicros(), p.GetComputeMicros(), p.GetCollectiveMicros(), p.GetLinkMicros(), p.GetLatencyMicros()} {
		if v < 0 || v > maxTimeout.Microseconds() {
			return nodecheck.Result{}, invalid("node check time %dus is out of range (0 to %s)", v, maxTimeout)
		}
	}
	if len(p.GetError()) > maxFailureText {
		return nodecheck.Result{}, invalid("node check error is longer than %d bytes", maxFailureText)
	}
	if b := p.GetBandwidthBytesPerSec(); b < 0 || b != b {
		return nodecheck.Result{}, invalid("node check bandwidth %g is not a non-negative number", b)
	}
	return nodecheck.Result{OK: p.GetOk(), Local: p.GetLocal(), Elapsed: us(p.GetElapsedMicros()), Compute: us(p.GetComputeMicros()),
		Collective: us(p.GetCollectiveMicros()), Link: us(p.GetLinkMicros()), Bandwidth: p.GetBandwidthBytesPerSec(),
		Latency: us(p.GetLatencyMicros()), Error: p.GetError()}, nil
}

// checkDeadlineLocked returns the check's tick event when its stage's
// deadline has passed.
func (c *core) checkDeadlineLocked(now time.Time) *jobstate.Event {
	if c.st.Check == nil {
		return nil
	}
	if d, ok := c.st.Check.Machine().NextDeadline(); ok && !now.Before(d) {
		return &jobstate.Event{Type: jobstate.EventCheckTick, Time: now}
	}
	return nil
}

// nodeCheck returns the running or last check, for the log.
func (c *core) nodeCheck() *nodecheck.Check {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.Check == nil {
		return nil
	}
	return c.st.Check.Machine().Last()
}

func describeNodeCheck(c *jobconfig.NodeCheck) string {
	if c == nil {
		return "off"
	}
	return fmt.Sprintf("on (exclude stragglers %v, comm perf %v)", c.ExcludeStragglers, c.CommPerf)
}
