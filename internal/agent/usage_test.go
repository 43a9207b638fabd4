package agent

import (
	"os"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

func TestUsageMeterSums(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	procs := map[int][2]float64{1: {100, 0}, 2: {200, 0}} // pid: rss bytes, cpu seconds
	u := &usageMeter{now: func() time.Time { return now }, read: func(pid int) (int64, float64, bool) {
		p, ok := procs[pid]
		return int64(p[0]), p[1], ok
	}}
	u.started([]int{1, 2})
	now = t0.Add(2 * time.Second)
	procs[1], procs[2] = [2]float64{500, 1}, [2]float64{300, 2} // 3 CPU s over 2 s
	if got, want := u.sample(), (&roverv1.NodeUsage{ResidentBytes: 800, PeakResidentBytes: 800, CpuCores: 1.5}); got.String() != want.String() {
		t.Fatalf("sample = %v; want %v", got, want)
	}
	now = t0.Add(4 * time.Second)
	procs[1], procs[2] = [2]float64{100, 1.5}, [2]float64{100, 2.5} // memory fell; 1 CPU s over 2 s
	if got, want := u.sample(), (&roverv1.NodeUsage{ResidentBytes: 200, PeakResidentBytes: 800, CpuCores: 0.5}); got.String() != want.String() {
		t.Fatalf("sample = %v; want %v", got, want)
	}
	// A new group starts its peak again; gone workers report nothing.
	procs = map[int][2]float64{}
	u.started([]int{3})
	if got := u.sample(); got != nil {
		t.Fatalf("sample of gone workers = %v; want nil", got)
	}
}

func TestProgressCarriesRealWorkersUsage(t *testing.T) {
	// A real process, this test's own (a spawned one could be signalled by
	// the package's other tests): its usage comes from /proc. That the
	// children count is metrics' TestTreeUsageCountsChildren.
	b := newProgressBook()
	b.workersStarted([]int{os.Getpid()})
	b.add(1, &roverv1.WorkerProgress{LocalRank: 0, Step: 1, Steps: 1})
	np := b.take()
	u := np.GetUsage()
	if u == nil || u.GetResidentBytes() <= 0 || u.GetPeakResidentBytes() < u.GetResidentBytes() || u.GetCpuCores() < 0 {
		t.Fatalf("usage = %v; want resident memory > 0, a peak at least that, CPU >= 0", u)
	}
}
