package master

import (
	"context"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/platform/platformtest"
)

// TestFleetRightSizesFromHeartbeats: the workers' usage on a node's
// heartbeats reaches the node manager, and the node's relaunch on a
// platform that honours Resources asks for what was used: more CPU (the
// workers were CPU-bound while their steps slowed down), less memory (far below the request), within the
// job's resource limits.
func TestFleetRightSizesFromHeartbeats(t *testing.T) {
	fake := platformtest.New(time.Now, platform.Capabilities{Hosts: true, AvoidHosts: true, Resources: true})
	spec := fleetJob(3)
	spec.RightSize = true
	spec.ResourceLimits = platform.Resources{MilliCPU: 5000} // 2.5 CPUs a node
	spec.Groups[0].Resources = platform.Resources{MilliCPU: 2000, MemoryBytes: 8 << 30}
	fm := startFleet(t, fleetOptions{spec: spec, platform: fake})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	ss := fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")
	for i, id := range []string{"train-worker-0-0", "train-worker-1-0"} {
		if err := fake.Start(id, []string{"host-a", "host-b"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Rank 0 is CPU-bound while its steps slow to twice their earlier time
	// (data loading starves it); rank 1 is as CPU-bound, steadily.
	busy := &roverv1.NodeUsage{ResidentBytes: 2 << 30, PeakResidentBytes: 3 << 30, CpuCores: 1.95}
	steady := &roverv1.NodeUsage{ResidentBytes: 5 << 30, PeakResidentBytes: 6 << 30, CpuCores: 1.95}
	for i := range int64(10) {
		wall := 1.0
		if i >= 5 {
			wall = 2
		}
		beat(ss[0], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(i+1, 1, wall, wall)}, Usage: busy})
		beat(ss[1], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(i+1, 1, 1, 1)}, Usage: steady})
	}
	// rover status shows each rank's usage and its next node's request.
	j := jobUntil(ctx, t, fm.c, "both ranks' usage shown", func(j *roverv1.GetJobResponse) bool {
		return len(j.GetManagedNodes()) == 2 && j.GetManagedNodes()[0].GetRightSize().GetStepSlowdown() > 0 && j.GetManagedNodes()[1].GetRightSize().GetStepSlowdown() > 0
	})
	r0, r1 := j.GetManagedNodes()[0].GetRightSize(), j.GetManagedNodes()[1].GetRightSize()
	if r0.GetPeakBytes() != 3<<30 || r0.GetStepSlowdown() != 2 || r0.GetNextMilliCpu() != 2500 || r0.GetNextMemoryBytes() != (3<<30)*5/4 || !strings.Contains(r0.GetWhy(), "CPU 2000m -> 2500m") {
		t.Errorf("rank 0's right-sizing %v: want peak 3 GiB, slowdown 2, next 2500m and 3.75 GiB with why", r0)
	}
	if r1.GetStepSlowdown() != 1 || r1.GetNextMilliCpu() != 2000 || r1.GetNextMemoryBytes() != 8<<30 || r1.GetWhy() != "" {
		t.Errorf("rank 1's right-sizing %v: want steady steps and the configured request", r1)
	}

	if err := fake.Exit("train-worker-0-0", 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-0-1")
	got := createdSpec(t, fake, "train-worker-0-1").Resources
	if want := (platform.Resources{MilliCPU: 2500, MemoryBytes: (3 << 30) * 5 / 4}); got != want {
		t.Fatalf("relaunch asks for %+v; want %+v (CPU raised to the limit's share, memory to the peak with headroom)", got, want)
	}
	if n := managed(t, fm.job(t), 0); !strings.Contains(n.GetReason(), "right-sized") {
		t.Errorf("managed rank 0's reason %q; want it to say it was right-sized", n.GetReason())
	}
	evs, _ := fm.m.Events().Since(0, 0)
	found := false
	for _, e := range evs {
		found = found || e.Kind == eventlog.NodeRightSized && e.Node == "train-worker-0-1" && strings.Contains(e.Message, "CPU 2000m -> 2500m")
	}
	if !found {
		t.Errorf("no node_right_sized event for the relaunch in the log: %v", evs)
	}
	// The other rank sent no usage: its node is untouched.
	if got := createdSpec(t, fake, "train-worker-1-0").Resources; got != spec.Groups[0].Resources {
		t.Errorf("rank 1 asks for %+v; want the group's %+v", got, spec.Groups[0].Resources)
	}
}
