package jobview

import (
	"bytes"
	"fmt"
	"strings"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// topCauses is how many badput causes the goodput line names.
const topCauses = 3

// GoodputLine is the job's goodput in one line, e.g.
//
//	goodput 0.83 of 120.0s: lost_progress 8.20s, worker_start 5.10s, restore 2.00s
//
// naming the largest badput causes (at most three) with their seconds. It is
// "" when the master reports no goodput (an older master, or a job it has
// not launched).
func GoodputLine(g *roverv1.JobGoodput) string {
	if g == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "goodput %.2f of %.1fs", g.GetRatio(), g.GetWallSeconds())
	var causes []string
	for _, c := range g.GetBadput() {
		if len(causes) == topCauses || c.GetSeconds() <= 0 {
			break
		}
		causes = append(causes, fmt.Sprintf("%s %.2fs", cell(c.GetCause()), c.GetSeconds()))
	}
	if len(causes) > 0 {
		fmt.Fprintf(&b, ": %s", strings.Join(causes, ", "))
	}
	if g.GetLostSteps() > 0 {
		fmt.Fprintf(&b, "; %d steps recomputed", g.GetLostSteps())
	}
	return b.String()
}

// writeGoodput writes the goodput line and the latest restarts' phases,
// in seconds: where each restart's downtime went.
func writeGoodput(b *bytes.Buffer, g *roverv1.JobGoodput) {
	line := GoodputLine(g)
	if line == "" {
		return
	}
	fmt.Fprintf(b, "\n%s\n", line)
	rs := g.GetLatestRestarts()
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(b, "restarts (the latest %d of %d):\n", len(rs), g.GetRestarts())
	tw := newTable(b)
	fmt.Fprintln(tw, "ROUND\tREASON\tDOWNTIME\tDETECT\tSTOP\tRENDEZVOUS\tSPAWN\tINIT\tRESTORE\tFIRST STEP\tRESUMED\tLOST STEPS")
	for _, r := range rs {
		to, resumed := "?", "-"
		if r.GetNewRound() > 0 {
			to = fmt.Sprint(r.GetNewRound())
		}
		if r.GetResumed() {
			resumed = fmt.Sprintf("step %d (%s)", r.GetResumedStep(), source(r.GetSource()))
		}
		down := fmt.Sprintf("%.2f", r.GetDowntimeSeconds())
		if !r.GetDone() {
			down += " (in progress)"
		}
		fmt.Fprintf(tw, "%d->%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%d\n",
			r.GetRound(), to, cell(r.GetReason()), down, r.GetDetectSeconds(), r.GetStopSeconds(), r.GetRendezvousSeconds(),
			r.GetSpawnSeconds(), r.GetInitSeconds(), r.GetRestoreSeconds(), r.GetFirstStepSeconds(), resumed, r.GetLostSteps())
	}
	_ = tw.Flush()
	for _, r := range rs {
		if line := RestoredFrom(r); line != "" {
			fmt.Fprintf(b, "round %d restored: %s\n", r.GetNewRound(), line)
		}
	}
}

// RestoredFrom says where each node of a restart restored from, and how
// long it took, on one line, e.g.
//
//	node-0 memory step 25 load 0.05s, node-1 backup peer node-0 step 25 fetch 0.01s load 0.04s
//
// "" when the restart lists no node.
func RestoredFrom(r *roverv1.RestartPhases) string {
	parts := make([]string, 0, len(r.GetNodes())+1)
	for _, n := range r.GetNodes() {
		p := cell(n.GetNodeId()) + " " + source(n.GetSource())
		if n.GetSource() == roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP {
			p += " peer"
		}
		if n.GetPeer() != "" {
			p += " " + cell(n.GetPeer())
		}
		p += fmt.Sprintf(" step %d", n.GetStep())
		if n.GetFetchSeconds() > 0 {
			p += fmt.Sprintf(" fetch %.2fs", n.GetFetchSeconds())
		}
		parts = append(parts, p+fmt.Sprintf(" load %.2fs", n.GetLoadSeconds()))
	}
	if m := r.GetMoreNodes(); m > 0 {
		parts = append(parts, fmt.Sprintf("%d more", m))
	}
	return strings.Join(parts, ", ")
}

func source(s roverv1.CheckpointSource) string {
	switch s {
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY:
		return "memory"
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_STORAGE:
		return "storage"
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_PEER:
		return "peer"
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP:
		return "backup"
	}
	return "none"
}
