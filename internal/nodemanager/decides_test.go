package nodemanager

import (
	"strings"
	"testing"
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
