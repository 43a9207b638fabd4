package agent

import (
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/metrics"
)

// usageMeter measures what the running group's workers use, for the
// master's right-sizing (docs/design/node-manager.md): their resident
// memory with their children's, the peak since the group started, and the
// CPU cores used since the previous sample. The progress book owns it,
// under its lock.
type usageMeter struct {
	pids    []int
	peak    int64
	lastCPU float64
	lastAt  time.Time
	// read returns a process tree's resident bytes and CPU seconds
	// (metrics.TreeUsage); now the clock. Replaced in tests.
	read func(pid int) (int64, float64, bool)
	now  func() time.Time
}

func newUsageMeter() *usageMeter {
	return &usageMeter{read: metrics.TreeUsage, now: time.Now}
}

// started begins measuring a new group's worker processes.
func (u *usageMeter) started(pids []int) {
	u.pids, u.peak, u.lastCPU, u.lastAt = pids, 0, 0, u.now()
}

// sample reads the workers' usage; nil when no worker could be read.
func (u *usageMeter) sample() *roverv1.NodeUsage {
	var rss int64
	var cpu float64
	n := 0
	for _, pid := range u.pids {
		r, c, ok := u.read(pid)
		if !ok {
			continue
		}
		rss += r
		cpu += c
		n++
	}
	if n == 0 {
		return nil
	}
	now := u.now()
	u.peak = max(u.peak, rss)
	out := &roverv1.NodeUsage{ResidentBytes: rss, PeakResidentBytes: u.peak}
	// A worker that exited takes its CPU time with it: no rate then.
	if dt := now.Sub(u.lastAt).Seconds(); dt > 0 && cpu >= u.lastCPU {
		out.CpuCores = (cpu - u.lastCPU) / dt
	}
	u.lastCPU, u.lastAt = cpu, now
	return out
}
