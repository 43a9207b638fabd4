package jobview

import (
	"bytes"
	"fmt"
	"strings"
	"text/tabwriter"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// newTable returns the tabwriter every table is written with. Tables are
// rendered into a buffer, so its Flush cannot fail.
func newTable(b *bytes.Buffer) *tabwriter.Writer {
	return tabwriter.NewWriter(b, 2, 4, 2, ' ', 0)
}

// writeNodes writes the table of the nodes the master knows: the agents
// that joined, their ranks, relaunches and hosts, and whether they are lost.
func writeNodes(b *bytes.Buffer, ns []*roverv1.NodeStatus) {
	tw := newTable(b)
	fmt.Fprintln(tw, "NODE\tRANK\tGROUP RANK\tADDR\tRELAUNCHES\tHOST\tSTATE")
	for _, n := range ns {
		st, gr := "alive", "-"
		if n.GetLost() {
			st = "lost: " + oneLine(n.GetLostReason())
		}
		if n.GetGroupRank() >= 0 {
			gr = fmt.Sprint(n.GetGroupRank())
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", cell(n.GetNodeId()), n.GetNodeRank(), gr,
			cell(n.GetAddr()), n.GetRelaunchCount(), cell(n.GetHost()), st)
	}
	_ = tw.Flush()
}

// writeManaged writes the table of the nodes the master's platform runs, one
// row per rank of each group. RELAUNCHES is "used/budget", followed by
// "critical" for a rank whose failure fails the job.
func writeManaged(b *bytes.Buffer, ms []*roverv1.ManagedNode) {
	tw := newTable(b)
	fmt.Fprintln(tw, "GROUP\tRANK\tNODE\tSTATE\tRELAUNCHES\tHOST\tLAST EXIT")
	for _, m := range ms {
		rl := fmt.Sprintf("%d/%d", m.GetRelaunches(), m.GetBudget())
		if m.GetCritical() {
			rl += " critical"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", cell(m.GetGroup()), m.GetRank(), cell(m.GetNodeId()),
			cell(m.GetState()), rl, cell(m.GetHost()), cell(m.GetLastExit()))
	}
	_ = tw.Flush()
}

// writeFailures writes the job's failure history, oldest first, with the
// master's diagnosis of each round (docs/fault-tolerance.md); nothing when
// there is none.
func writeFailures(b *bytes.Buffer, fs []*roverv1.WorkerFailure) {
	if len(fs) == 0 {
		return
	}
	b.WriteString("\nfailures:\n")
	tw := newTable(b)
	fmt.Fprintln(tw, "ROUND\tNODE\tRANK\tEXIT\tCAUSE\tACTION\tWHY")
	for _, f := range fs {
		exit := fmt.Sprint(f.GetExitCode())
		if f.GetSignal() != 0 {
			exit = fmt.Sprintf("signal %d", f.GetSignal())
		}
		why := f.GetDiagnosis()
		if why == "" {
			why = f.GetMessage()
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", f.GetRound(), cell(f.GetNodeId()), f.GetRank(), exit,
			cell(f.GetCause()), cell(f.GetAction()), oneLine(why))
	}
	_ = tw.Flush()
}

// cell is s fit for a table cell: on one line, "-" when empty.
func cell(s string) string {
	return orDash(oneLine(s))
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine puts s on one line: newlines and tabs, which would break a line or
// a table, become spaces.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\t", " ").Replace(s)
}
