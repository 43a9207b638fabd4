package jobview

import (
	"bytes"
	"fmt"
	"strings"
	"text/tabwriter"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// writeProgress writes the job's runtime progress for `rover status`: the
// newest step, the stragglers and why, a hang and where each rank stood in
// its collectives, and each node's median step times (wall-clock and busy,
// compute and wait where workers time their collectives, and the link's
// round trip where the agents measure it). It writes
// nothing before any step.
func writeProgress(b *bytes.Buffer, p *roverv1.JobProgress) {
	if p == nil || (p.GetStep() < 0 && p.GetHangs() == 0) {
		return
	}
	fmt.Fprintf(b, "\nprogress: step %d", p.GetStep())
	if s := p.GetStragglers(); len(s) > 0 {
		fmt.Fprintf(b, ", stragglers: %s", strings.Join(s, ", "))
	}
	if p.GetHangs() > 0 {
		fmt.Fprintf(b, ", hangs %d", p.GetHangs())
	}
	b.WriteString("\n")
	if p.GetStragglerReason() != "" {
		fmt.Fprintf(b, "straggler: %s\n", oneLine(p.GetStragglerReason()))
	}
	if p.GetHung() {
		fmt.Fprintf(b, "HUNG: %s\n", oneLine(p.GetHangReason()))
		writeHangCollectives(b, p.GetHangCollectives())
	}
	if len(p.GetNodes()) == 0 {
		return
	}
	timed, gpu, linked := false, false, false
	for _, n := range p.GetNodes() {
		timed = timed || n.GetComputeSeconds() > 0 || n.GetWaitSeconds() > 0
		gpu = gpu || n.GetMatmulTflops() > 0
		linked = linked || n.GetLinkRttSeconds() > 0
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	header := "NODE\tRANK\tSTEP\tS/STEP\tBUSY S/STEP\t"
	if timed {
		header += "COMPUTE S/STEP\tWAIT S/STEP\t"
	}
	if gpu {
		header += "MATMUL TFLOPS\t"
	}
	if linked {
		header += "LINK RTT MS\t"
	}
	fmt.Fprintln(tw, header+"SAMPLES\t")
	for _, n := range p.GetNodes() {
		mark := ""
		if n.GetStraggler() {
			mark = "straggler"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t", n.GetNodeId(), n.GetNodeRank(), n.GetStep(), n.GetStepSeconds(), n.GetBusySeconds())
		if timed {
			fmt.Fprintf(tw, "%.3f\t%.3f\t", n.GetComputeSeconds(), n.GetWaitSeconds())
		}
		if gpu {
			fmt.Fprintf(tw, "%.2f\t", n.GetMatmulTflops())
		}
		if linked {
			fmt.Fprintf(tw, "%.2f\t", 1e3*n.GetLinkRttSeconds())
		}
		fmt.Fprintf(tw, "%d\t%s\n", n.GetSamples(), mark)
	}
	_ = tw.Flush()
}

// writeHangCollectives writes where each rank stood in its collectives
// when the hang was declared, and in its DDP steps where ranks report
// them ("-": nothing reported).
func writeHangCollectives(b *bytes.Buffer, rcs []*roverv1.RankCollective) {
	if len(rcs) == 0 {
		return
	}
	steps := false
	for _, rc := range rcs {
		steps = steps || rc.GetDdpStep() != nil
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	header := "RANK\tNODE\tCOLLECTIVE\tSEQ\tGROUP\tBYTES\tSTATE"
	if steps {
		header += "\tDDP STEP\tBUCKETS"
	}
	fmt.Fprintln(tw, header)
	for _, rc := range rcs {
		fmt.Fprintf(tw, "%d\t%s\t", rc.GetRank(), rc.GetNodeId())
		if c := rc.GetCollective(); c != nil {
			state := "in it"
			if c.GetDone() {
				state = "completed it"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s", c.GetOp(), c.GetSeq(), c.GetGroup(), c.GetBytes(), state)
		} else {
			fmt.Fprint(tw, "-\t-\t-\t-\t-")
		}
		if d := rc.GetDdpStep(); steps && d != nil {
			timed := "untimed"
			if d.GetBucketsTimed() {
				timed = "timed"
			}
			fmt.Fprintf(tw, "\t%d\t%s", d.GetForwards(), timed)
		} else if steps {
			fmt.Fprint(tw, "\t-\t-")
		}
		fmt.Fprint(tw, "\n")
	}
	_ = tw.Flush()
}

// progressNote is the short form for the one-line progress and the
// summary: ", stragglers node1", ", hung", ", 1 hang"; "" for none.
func progressNote(p *roverv1.JobProgress) string {
	var b strings.Builder
	if s := p.GetStragglers(); len(s) > 0 {
		fmt.Fprintf(&b, ", stragglers %s", strings.Join(s, ","))
	}
	switch {
	case p.GetHung():
		b.WriteString(", HUNG")
	case p.GetHangs() == 1:
		b.WriteString(", 1 hang")
	case p.GetHangs() > 1:
		fmt.Fprintf(&b, ", %d hangs", p.GetHangs())
	}
	return b.String()
}
