package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/tlstest"
)

// TestJobOverTLS runs a two-node job of Go SDK workers whose master serves
// TLS (`rover master --tls-cert --tls-key`, a CA and certificate made in the
// test): the agents join with --tls-ca, hold their sessions, publish the
// workers' rendezvous in the key-value store and lease every shard through
// the master, and every sample is trained exactly once. `rover status`
// reads the job over TLS; an agent without the CA bundle is refused at once
// with a message that names --tls-ca.
func TestJobOverTLS(t *testing.T) {
	const size = 800
	dir := t.TempDir()
	files := tlstest.NewCA(t, "job CA").WriteServer(t, dir, "127.0.0.1")
	c := newCluster(t, "tls", "--tls-cert", files.Cert, "--tls-key", files.Key)
	args := []string{"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-conf", rdzvConf, "--tls-ca", files.CA,
		"--no-python", sdkWorker, "--out", dir, "--size", strconv.Itoa(size), "--shard-size", "10", "--per-shard", "5ms"}
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)

	status := exec.Command(roverBin, "status", "--master", c.addr, "--token-file", c.tokenFile, "--tls-ca", files.CA)
	if out, err := status.CombinedOutput(); err != nil || !strings.Contains(string(out), "job tls:") {
		t.Errorf("rover status over TLS: %v\n%s", err, out)
	}
	plain := c.agent("plain", "--nnodes", "2", "--rdzv-conf", rdzvConf, "--no-python", "true")
	if code := plain.wait(t, jobTimeout); code != 3 || !strings.Contains(plain.out.String(), "serves TLS") ||
		!strings.Contains(plain.out.String(), "--tls-ca") {
		t.Errorf("an agent without --tls-ca exited %d, want 3 naming --tls-ca:\n%s", code, plain.out)
	}

	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if !strings.Contains(c.master.out.String(), "tls=true") {
		t.Errorf("the master did not say it serves TLS:\n%s", c.master.out)
	}
	count, _ := leasedLines(t, filepath.Join(dir, "done.jsonl"))
	for i := int64(0); i < size; i++ {
		if n := count[[2]int64{0, i}]; n != 1 {
			t.Errorf("sample %d completed %d times, want once", i, n)
		}
	}
}
