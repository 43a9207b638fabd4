package jobview

import (
	"bytes"
	"fmt"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// writeNodeCheck writes the running or last node check: its state and, per
// node, the verdict, best time, link bandwidth and whether it was excluded
// (docs/user-guide.md, "Checking the nodes before training"); nothing when
// the job ran none.
func writeNodeCheck(b *bytes.Buffer, nc *roverv1.NodeCheckStatus) {
	if nc == nil {
		return
	}
	fmt.Fprintf(b, "\nnode check of round %d: ", nc.GetRound())
	switch {
	case nc.GetRunning():
		fmt.Fprintf(b, "running, stage %d of at most 2\n", nc.GetStage())
	case nc.GetCancelled():
		fmt.Fprintf(b, "cancelled (the world changed) in stage %d\n", nc.GetStage())
	default:
		took := time.Duration(nc.GetEndedUnixNanos() - nc.GetStartedUnixNanos())
		fmt.Fprintf(b, "finished in %s, %d stage(s), median time %s\n", duration(took), nc.GetStage(), micros(nc.GetMedianMicros()))
	}
	if len(nc.GetVerdicts()) == 0 {
		return
	}
	bw := map[string]float64{}
	for _, r := range nc.GetReports() {
		if x := r.GetResult().GetBandwidthBytesPerSec(); x > 0 && (bw[r.GetNodeId()] == 0 || x > bw[r.GetNodeId()]) {
			bw[r.GetNodeId()] = x
		}
	}
	tw := newTable(b)
	fmt.Fprintln(tw, "NODE\tVERDICT\tTIME\tLINK MB/S\tEXCLUDED\tREASON")
	for _, v := range nc.GetVerdicts() {
		link := "-"
		if x := bw[v.GetNodeId()]; x > 0 {
			link = fmt.Sprintf("%.1f", x/1e6)
		}
		ex := "no"
		if v.GetExcluded() {
			ex = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(v.GetNodeId()), cell(v.GetVerdict()), micros(v.GetTimeMicros()), link, ex, cell(v.GetReason()))
	}
	_ = tw.Flush()
}

func micros(us int64) string {
	if us <= 0 {
		return "-"
	}
	return (time.Duration(us) * time.Microsecond).Round(time.Millisecond).String()
}
