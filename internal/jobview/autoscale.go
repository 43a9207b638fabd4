package jobview

import (
	"bytes"
	"fmt"
	"text/tabwriter"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// writeAutoScale writes the auto-scaling policy's state for `rover status`
// and the summary: the target, the last change and the latest decision
// with their reasons, and the throughput measured per world size. It
// writes nothing when auto-scaling is off.
func writeAutoScale(b *bytes.Buffer, a *roverv1.AutoScaleStatus) {
	if a == nil {
		return
	}
	if a.GetUnit() == "ps" { // a parameter-server job's PS scaling
		fmt.Fprintf(b, "\nPS scaling: %d PS, %d changes", a.GetTargetNodes(), a.GetChanges())
	} else {
		fmt.Fprintf(b, "\nauto-scaling: target %d nodes, %d changes", a.GetTargetNodes(), a.GetChanges())
	}
	if c := a.GetCapacity(); c >= 0 {
		fmt.Fprintf(b, ", capacity %d nodes", c)
	}
	b.WriteString("\n")
	if d := a.GetLastChange(); d != nil {
		fmt.Fprintf(b, "last change: %s (%s): %s\n", d.GetAction(), d.GetReason(), oneLine(d.GetMessage()))
	}
	if d := a.GetLatest(); d != nil && d.GetAction() == "hold" {
		fmt.Fprintf(b, "now: hold (%s): %s\n", d.GetReason(), oneLine(d.GetMessage()))
	}
	if len(a.GetSizes()) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODES\tTHROUGHPUT (%s)\tSTD ERR\tSAMPLES\tTRUSTED\t\n", a.GetUnit())
	for _, s := range a.GetSizes() {
		fmt.Fprintf(tw, "%d\t%.4g\t%.2g\t%d\t%v\t\n", s.GetNodes(), s.GetThroughput(), s.GetStdErr(), s.GetSamples(), s.GetTrusted())
	}
	tw.Flush()
}
