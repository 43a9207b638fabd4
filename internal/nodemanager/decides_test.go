package nodemanager

import (
	"fmt"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/platform"
)

// psGroups is a parameter-server job's groups: two PS that never exit on
// their own, two workers, and the chief, whose success decides the job.
func psGroups(chiefDecides bool) Spec {
	g := func(name string, n int) GroupSpec {
		return GroupSpec{Name: name, MinNodes: n, MaxNodes: n, Argv: []string{"python", "train.py"}}
	}
	chief, ps, worker := g("chief", 1), g("ps", 2), g("worker", 2)
	chief.DecidesJob = chiefDecides
	worker.DecidesJob = !chiefDecides
	return spec(chief, ps, worker)
}

// TestDecidesJob: the group that decides a job's outcome ends it as
// succeeded once all its nodes succeeded, and only then; a relaunch in
// between changes nothing.
func TestDecidesJob(t *testing.T) {
	t.Run("the chief decides", func(t *testing.T) {
		m := mustNew(t, psGroups(true))
		cmds := run(t, m, []step{start(),
			exit("train-worker-0-0", 0).then(),
			exit("train-worker-1-0", 1).then("Delete train-worker-1-0", "Create train-worker-1-1"),
			exit("train-worker-1-1", 0).then(),
			exit("train-chief-0-0", 0).then("Succeed"),
			exit("train-chief-0-0", 0).then(), // a repeat decides nothing more
		})
		last := cmds[len(cmds)-1]
		if !strings.Contains(last.Reason, "chief") {
			t.Errorf("reason %q does not name the chief group", last.Reason)
		}
	})
	t.Run("without a chief, all workers decide", func(t *testing.T) {
		m := mustNew(t, psGroups(false))
		run(t, m, []step{start(),
			exit("train-chief-0-0", 0).then(),
			exit("train-worker-0-0", 0).then(),
			exit("train-ps-0-0", 1).then("Delete train-ps-0-0", "Create train-ps-0-1"),
			exit("train-worker-1-0", 0).then("Succeed"),
		})
	})
	t.Run("a group that does not decide never ends the job", func(t *testing.T) {
		m := mustNew(t, spec(workers(2, 2)))
		run(t, m, []step{start(), exit("train-worker-0-0", 0).then(), exit("train-worker-1-0", 0).then()})
	})
}

// TestPSOOM: a PS killed for memory comes back at the same rank with more
// memory (DLRover's rule, the same for every group), and the chief still
// decides the job afterwards.
func TestPSOOM(t *testing.T) {
	sp := psGroups(true)
	sp.Groups[1].MemoryLimit = 1 << 30
	m := mustNew(t, sp)
	cmds := run(t, m, []step{start(),
		oom("train-ps-1-0").then("Delete train-ps-1-0", "Create train-ps-1-1"),
		exit("train-chief-0-0", 0).then("Succeed"),
	})
	var relaunch *Command
	for i := range cmds {
		if cmds[i].NodeID == "train-ps-1-1" {
			relaunch = &cmds[i]
		}
	}
	if relaunch == nil || relaunch.Spec.Group != "ps" || relaunch.Spec.Rank != 1 || relaunch.Spec.Resources.MemoryBytes <= 1<<30 {
		t.Fatalf("relaunch %+v: want ps rank 1 with more than 1 GiB", relaunch)
	}
	if !strings.Contains(relaunch.Reason, "memory raised") {
		t.Errorf("reason %q does not say the memory was raised", relaunch.Reason)
	}
}

// TestMigrate: a running PS migrated to more CPU is deleted, and once it
// is gone (never before: the two would share the rank's address) a node
// asking for that CPU takes its rank, spending no relaunch budget (a PS
// of budget 1 is migrated twice and still relaunched once after a
// failure); the old node's exit, even 0 on SIGTERM, is no success and no
// failure; a request not above the current one, a node not running, or
// one already being migrated changes nothing; the CPU and a migration
// under way survive a journal round trip, and the CPU shows in the status.
func TestMigrate(t *testing.T) {
	sp := psGroups(true)
	sp.Groups[1].MilliCPU = 500
	sp.Groups[1].RestartCount = 1
	m := mustNew(t, sp)
	mig := func(id string, cpu int64) step {
		return act(Action{Kind: MigrateNode, NodeID: id, MilliCPU: cpu, Reason: "ps hot"})
	}
	cmds := run(t, m, []step{start(),
		mig("train-ps-1-0", 1000).then(), // pending: not migrated
		running("train-ps-1-0", "h"),
		mig("train-ps-1-0", 400).then(), // less than it has
		mig("train-ps-1-0", 1000).then("Delete train-ps-1-0"),
		mig("train-ps-1-0", 3000).then(), // already being migrated
	})
	b, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	if m, err = Restore(b); err != nil { // a master restarted mid-migration
		t.Fatal(err)
	}
	cmds = append(cmds, run(t, m, []step{
		exit("train-ps-1-0", 0).then("Delete train-ps-1-0", "Create train-ps-1-1"), // SIGTERM'd; 0 is no success
		event(platform.Event{NodeID: "train-ps-1-0", Kind: platform.Deleted}).then(),
		running("train-ps-1-1", "h"),
		mig("train-ps-1-1", 2000).then("Delete train-ps-1-1"),
		event(platform.Event{NodeID: "train-ps-1-1", Kind: platform.Deleted}).then("Create train-ps-1-2"),
		running("train-ps-1-2", "h"),
		exit("train-ps-1-2", 1).then("Delete train-ps-1-2", "Create train-ps-1-3"),
	})...)
	var cpus []int64
	for _, c := range cmds {
		if c.Kind == CreateNode && c.Spec.Group == "ps" && c.Spec.Rank == 1 {
			cpus = append(cpus, c.Spec.Resources.MilliCPU)
		}
	}
	if fmt.Sprint(cpus) != "[0 1000 2000 2000]" {
		t.Errorf("ps 1's nodes asked for %v milli-CPU, want [0 1000 2000 2000]: the group's (unreserved), then the migrations'", cpus)
	}
	st := m.Status()
	var ps1 NodeStatus
	for _, n := range st.Nodes {
		if n.Group == "ps" && n.Rank == 1 {
			ps1 = n
		}
	}
	if ps1.MilliCPU != 2000 || ps1.Relaunches != 1 || st.Relaunches != 1 || ps1.NodeID != "train-ps-1-3" {
		t.Errorf("status %+v, job relaunches %d; want train-ps-1-3 at 2000m, 1 relaunch (the failure; the two migrations spend none)", ps1, st.Relaunches)
	}
}
