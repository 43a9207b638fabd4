package jobview

import (
	"bytes"
	"fmt"
	"strings"
	"text/tabwriter"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// writeProgress writes the job's runtime progress for `rover status`: the
// newest step, the stragglers and why, a hang, and each node's median step
// times (wall-clock and busy). It writes nothing before any step.
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
	}
	if len(p.GetNodes()) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRANK\tSTEP\tS/STEP\tBUSY S/STEP\tSAMPLES\t")
	for _, n := range p.GetNodes() {
		mark := ""
		if n.GetStraggler() {
			mark = "straggler"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t%d\t%s\n", n.GetNodeId(), n.GetNodeRank(), n.GetStep(),
			n.GetStepSeconds(), n.GetBusySeconds(), n.GetSamples(), mark)
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
