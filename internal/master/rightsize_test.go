package master

import (
	"context"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/platform/platformtest"
)

// TestFleetRightSizesFromHeartbeats: the workers' usage on a node's
// heartbeats reaches the node manager, and the node's relaunch on a
// platform that honours Resources asks for what was used: more CPU (the
// workers were CPU-bound), less memory (far below the request), within the
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
	usage := &roverv1.NodeUsage{ResidentBytes: 2 << 30, PeakResidentBytes: 3 << 30, CpuCores: 1.95}
	beat(ss[0], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(1, 0, 0, 0)}, Usage: usage})
	beat(ss[0], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(2, 1, 1, 1)}, Usage: usage})
	// The step shows the heartbeat was handled, and with it its usage.
	jobUntil(ctx, t, fm.c, "step 2", func(j *roverv1.GetJobResponse) bool { return j.GetProgress().GetStep() == 2 })

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
	// The other rank sent no usage: its node is untouched.
	if got := createdSpec(t, fake, "train-worker-1-0").Resources; got != spec.Groups[0].Resources {
		t.Errorf("rank 1 asks for %+v; want the group's %+v", got, spec.Groups[0].Resources)
	}
}
