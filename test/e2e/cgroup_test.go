package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A CPU cgroup of this machine for the tests that slow a node the way a
// throttled or oversubscribed machine is slow: its agent and workers run
// in the cgroup, and a CPU quota on it (cgroup v1's cpu.cfs_quota_us, or
// v2's cpu.max) limits them all, with the script unchanged. It needs root
// and a cgroup file system with the cpu controller; without them the tests
// fail rather than skip, since CI runs as root. The cgroup is removed when
// the test ends, failed or not.

// cpuCgroup is one cgroup with the cpu controller.
type cpuCgroup struct {
	t    *testing.T
	dir  string // its directory
	v2   bool   // cgroup v2 (cpu.max), else v1 (cpu.cfs_quota_us)
	root string // the directory processes go back to on cleanup
}

// cgroupCPURoot finds where this machine's cpu controller is mounted:
// cgroup v1's cpu hierarchy, else a cgroup v2 hierarchy with cpu among
// its controllers.
func cgroupCPURoot() (dir string, v2 bool, err error) {
	for _, d := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
		if fileExists(filepath.Join(d, "cpu.cfs_quota_us")) {
			return d, false, nil
		}
	}
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
		if err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " cpu ") {
			return d, true, nil
		}
	}
	return "", false, errors.New("no cgroup file system with the cpu controller under /sys/fs/cgroup " +
		"(neither v1's cpu/cpu.cfs_quota_us nor a v2 hierarchy listing cpu in cgroup.controllers)")
}

// newCPUCgroup makes a cgroup with no quota yet.
func newCPUCgroup(t *testing.T, name string) *cpuCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the CPU-quota tests must run as root (they create cgroups); CI runs them as root")
	}
	root, v2, err := cgroupCPURoot()
	if err != nil {
		t.Fatalf("the CPU-quota tests need cgroups: %v", err)
	}
	if v2 {
		// The cpu controller must be enabled for the children of root.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
			t.Fatalf("enable the cpu controller in %s: %v", root, err)
		}
	}
	g := &cpuCgroup{t: t, dir: filepath.Join(root, fmt.Sprintf("rover-e2e-%s-%04x", name, rand.IntN(1<<16))), v2: v2, root: root}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		t.Fatalf("create cgroup %s: %v", g.dir, err)
	}
	t.Cleanup(g.remove)
	return g
}

// procsFile is where a pid is written to move it into the cgroup.
func (g *cpuCgroup) procsFile() string { return filepath.Join(g.dir, "cgroup.procs") }

// limit sets the quota to fraction of one core (per 100 ms period).
func (g *cpuCgroup) limit(fraction float64) {
	g.t.Helper()
	const period = 100000 // µs
	quota := int(fraction * period)
	if g.v2 {
		g.write("cpu.max", fmt.Sprintf("%d %d", quota, period))
		return
	}
	g.write("cpu.cfs_period_us", strconv.Itoa(period))
	g.write("cpu.cfs_quota_us", strconv.Itoa(quota))
}

func (g *cpuCgroup) write(file, value string) {
	g.t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(value), 0o644); err != nil {
		g.t.Fatalf("cgroup %s: write %q to %s: %v", g.dir, value, file, err)
	}
}

// throttled is the number of periods in which the cgroup was throttled.
func (g *cpuCgroup) throttled() int64 {
	b, _ := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "nr_throttled" {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// remove lifts the quota, moves what still runs in the cgroup back to the
// root and removes the cgroup. It runs after the cluster's processes were
// killed (it is registered before them), so what remains is their
// orphaned children at most.
func (g *cpuCgroup) remove() {
	if g.v2 {
		_ = os.WriteFile(filepath.Join(g.dir, "cpu.max"), []byte("max"), 0o644)
	} else {
		_ = os.WriteFile(filepath.Join(g.dir, "cpu.cfs_quota_us"), []byte("-1"), 0o644)
	}
	// A process moved out may still be listed for a moment: move and remove
	// until the cgroup is gone.
	waitFor(g.t, time.Minute, "the cgroup "+g.dir+" to be removed", func() bool {
		b, _ := os.ReadFile(g.procsFile())
		for _, pid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(g.root, "cgroup.procs"), []byte(pid), 0o644)
		}
		err := os.Remove(g.dir)
		return err == nil || errors.Is(err, os.ErrNotExist)
	})
}

// agentInCgroup starts a node agent in cgroup g: a shell moves itself into
// it and then becomes the agent, so the agent and every worker it starts
// run there from the first instruction.
func (c *cluster) agentInCgroup(g *cpuCgroup, name string, args ...string) *process {
	c.t.Helper()
	base := []string{"-c", `echo $$ > "$0" && exec "$@"`, g.procsFile(), roverBin, "run", "--rdzv-endpoint", c.addr,
		"--token-file", c.tokenFile, "--rdzv-id", c.job, "--node-id", name, "--heartbeat-interval", "1s", "--stop-grace-period", "5s"}
	return c.startCmd(name, "/bin/sh", append(base, args...)...)
}
