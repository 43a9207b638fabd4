package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A small network of this machine for the tests that need real links:
// one network namespace per node, each joined by a veth pair to a bridge
// on the host, where the master listens. Inside every namespace the
// node's end is called eth0 (so GLOO_SOCKET_IFNAME=eth0 fits every node).
// It needs root, ip and tc; without them the tests fail rather than skip,
// since CI runs as root. Everything it creates is removed when the test
// ends, failed or not.

// nsNode is one node's namespace.
type nsNode struct {
	ns       string // the network namespace
	ip       string // the node's address on the bridge
	hostVeth string // the host's end of its veth pair
}

// netnsNet is the bridge and the nodes' namespaces.
type netnsNet struct {
	t      *testing.T
	bridge string
	hostIP string // the bridge's address: where the master listens
	nodes  []nsNode
}

// tool finds a program of iproute2, also in /usr/sbin and /sbin when
// PATH lacks them.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := dir + "/" + name; fileExists(p) {
			return p
		}
	}
	t.Fatalf("%s not found: the network namespace tests need iproute2 (apt-get install iproute2)", name)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// run runs an ip or tc command and fails the test on error.
func (n *netnsNet) run(args ...string) {
	n.t.Helper()
	args = append([]string(nil), args...)
	if len(args) > 4 && args[1] == "netns" && args[2] == "exec" {
		args[4] = tool(n.t, args[4]) // the program run inside the namespace
	}
	if out, err := exec.Command(tool(n.t, args[0]), args[1:]...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetns makes a bridge and count namespaces on a random 10.x.y.0/24.
func newNetns(t *testing.T, count int) *netnsNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the network namespace tests must run as root (they create namespaces, veth pairs and a bridge); CI runs them as root")
	}
	tool(t, "ip")
	tool(t, "tc")
	tag := fmt.Sprintf("%04x", rand.IntN(1<<16))
	subnet := fmt.Sprintf("10.%d.%d", 100+rand.IntN(100), rand.IntN(256))
	n := &netnsNet{t: t, bridge: "rvb" + tag, hostIP: subnet + ".1"}
	// Cleanup first, so that a failure half-way still removes what exists.
	t.Cleanup(func() {
		for _, nd := range n.nodes {
			_ = exec.Command(tool(t, "ip"), "netns", "del", nd.ns).Run()
			_ = exec.Command(tool(t, "ip"), "link", "del", nd.hostVeth).Run()
		}
		_ = exec.Command(tool(t, "ip"), "link", "del", n.bridge).Run()
	})
	n.run("ip", "link", "add", n.bridge, "type", "bridge")
	n.run("ip", "addr", "add", n.hostIP+"/24", "dev", n.bridge)
	n.run("ip", "link", "set", n.bridge, "up")
	for i := range count {
		nd := nsNode{ns: fmt.Sprintf("rover-%s-%d", tag, i), ip: fmt.Sprintf("%s.%d", subnet, 10+i), hostVeth: fmt.Sprintf("rv%sh%d", tag, i)}
		n.nodes = append(n.nodes, nd)
		n.run("ip", "netns", "add", nd.ns)
		n.run("ip", "link", "add", nd.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", nd.ns)
		n.run("ip", "link", "set", nd.hostVeth, "master", n.bridge)
		n.run("ip", "link", "set", nd.hostVeth, "up")
		n.run("ip", "netns", "exec", nd.ns, "ip", "addr", "add", nd.ip+"/24", "dev", "eth0")
		n.run("ip", "netns", "exec", nd.ns, "ip", "link", "set", "eth0", "up")
		n.run("ip", "netns", "exec", nd.ns, "ip", "link", "set", "lo", "up")
	}
	return n
}

// slow limits node i's link, both ways, to rate: with netem's delay and
// rate where the kernel has netem, else with a token bucket (tbf) of that
// rate. It returns the qdisc it used.
func (n *netnsNet) slow(i int, delay, rate string) string {
	n.t.Helper()
	nd := n.nodes[i]
	tc := tool(n.t, "tc")
	netem := []string{"qdisc", "add", "dev", nd.hostVeth, "root", "netem", "delay", delay, "rate", rate}
	if err := exec.Command(tc, netem...).Run(); err == nil {
		n.run("ip", "netns", "exec", nd.ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", delay, "rate", rate)
		_ = tc
		return "netem"
	}
	// This kernel has no netem (sch_netem): shape the rate alone.
	tbf := []string{"root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"}
	n.run(append([]string{"tc", "qdisc", "add", "dev", nd.hostVeth}, tbf...)...)
	n.run(append([]string{"ip", "netns", "exec", nd.ns, "tc", "qdisc", "add", "dev", "eth0"}, tbf...)...)
	return "tbf"
}

// agentIn starts a node agent inside node i's namespace.
func (c *cluster) agentIn(n *netnsNet, i int, name string, args ...string) *process {
	c.t.Helper()
	base := []string{"netns", "exec", n.nodes[i].ns, roverBin, "run", "--rdzv-endpoint", c.addr, "--token-file", c.tokenFile,
		"--rdzv-id", c.job, "--node-id", name, "--heartbeat-interval", "1s", "--stop-grace-period", "5s"}
	return c.startCmd(name, tool(c.t, "ip"), append(base, args...)...)
}
