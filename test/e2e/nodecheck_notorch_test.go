package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// noTorchPython writes a Python that cannot import torch: the real one,
// with a torch package first on its path that fails to import, as on a
// node whose image lacks torch.
func noTorchPython(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	block := filepath.Join(dir, "block", "torch")
	if err := os.MkdirAll(block, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(block, "__init__.py"), []byte("raise ImportError(\"No module named 'torch'\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(dir, "python-without-torch")
	script := "#!/bin/sh\nPYTHONPATH=" + filepath.Join(dir, "block") + "${PYTHONPATH:+:$PYTHONPATH} exec " + pythonExec + " \"$@\"\n"
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return py
}

// TestNodeCheckWithoutTorch: with a Python that cannot import torch, the
// node check (--network-check) cannot run its all-reduce, and says so: no
// node passes, each agent's log and the master's verdicts give the reason
// (the Python and that it cannot import torch), and the agents exit 5.
// Before, every node "passed" and nothing said the all-reduce was skipped.
func TestNodeCheckWithoutTorch(t *testing.T) {
	c := newCluster(t, "nc-notorch")
	c.env = []string{"PYTHON_EXEC=" + noTorchPython(t)}
	a := c.agent("node-a", "--nnodes", "2", "--network-check", "--nproc-per-node", "1", "--no-python", "true")
	b := c.agent("node-b", "--nnodes", "2", "--network-check", "--nproc-per-node", "1", "--no-python", "true")
	for _, p := range []*process{a, b} {
		if code := p.wait(t, jobTimeout); code != 5 {
			t.Fatalf("%s exited %d, want 5 (node check):\n%s", p.name, code, p.out)
		}
		// The error that ends the agent quotes the verdict's reason.
		if out := p.out.String(); !strings.Contains(out, "rover: the node check excluded this node (faulty)") ||
			!strings.Contains(out, "cannot import torch (ImportError") {
			t.Errorf("%s does not say that its Python cannot import torch:\n%s", p.name, out)
		}
	}
	if out := c.master.out.String(); strings.Count(out, "its own check program failed: check program failed in import: python at") != 2 {
		t.Errorf("the master's verdicts do not give each node's reason:\n%s", out)
	}
	verdicts, _, _ := checkVerdicts(t, c.master.out.String())
	for _, n := range []string{"node-a", "node-b"} {
		if v := verdicts[n]; v == "" || v == "passed" {
			t.Errorf("%s: verdict %q, want one that is not a pass", n, v)
		}
	}
}
