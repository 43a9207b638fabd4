package jobview

import (
	"bytes"
	"fmt"
	"strings"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// writeRightSize writes, for `rover status`, each rank's right-sizing
// (docs/design/node-manager.md, "Right-sized nodes"): what its workers
// used (peak memory, recent CPU against the node's request, how much its
// steps slowed down) and what its next node would ask for, and why, or
// "as configured". It writes nothing when no rank has a usage record.
func writeRightSize(b *bytes.Buffer, ms []*roverv1.ManagedNode) {
	var rows []*roverv1.ManagedNode
	for _, m := range ms {
		if m.GetRightSize() != nil {
			rows = append(rows, m)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nright-sizing (what the workers used; what the next node asks for):\n")
	tw := newTable(b)
	fmt.Fprintln(tw, "GROUP\tRANK\tPEAK MEMORY\tCPU USED\tSTEPS\tNEXT CPU\tNEXT MEMORY\tWHY")
	for _, m := range rows {
		r := m.GetRightSize()
		cpu := "-"
		if r.GetSampledMilliCpu() > 0 {
			cpu = fmt.Sprintf("%.2f of %dm", r.GetCpuCores(), r.GetSampledMilliCpu())
		} else if r.GetCpuCores() > 0 {
			cpu = fmt.Sprintf("%.2f", r.GetCpuCores())
		}
		steps := "-" // until both step windows are full
		if s := r.GetStepSlowdown(); s > 0 {
			steps = fmt.Sprintf("%.2fx", s)
		}
		why := strings.TrimPrefix(r.GetWhy(), "right-sized: ")
		if why == "" {
			why = "as configured"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(m.GetGroup()), m.GetRank(), memory(r.GetPeakBytes()),
			cpu, steps, milliCPU(r.GetNextMilliCpu()), memory(r.GetNextMemoryBytes()), cell(why))
	}
	_ = tw.Flush()
}

// memory is a byte count in MiB or GiB; "-" for none.
func memory(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n >= 1<<30:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%.0fMiB", float64(n)/(1<<20))
	}
}

// milliCPU is a CPU request; "-" for none.
func milliCPU(m int64) string {
	if m <= 0 {
		return "-"
	}
	return fmt.Sprintf("%dm", m)
}
