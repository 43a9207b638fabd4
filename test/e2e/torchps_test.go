package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestTorchParameterServerExample runs examples/parameter_server under
// rover submit: 2 PS, 3 workers and a chief, in torch.distributed.rpc,
// each reading its role from TF_CONFIG. The workers' pushes train the
// model the PS hold (the chief's held-out loss falls tenfold), each PS
// saves its slice, and the chief's success ends the job.
func TestTorchParameterServerExample(t *testing.T) {
	const steps = 30
	job := uniqueJob("torchps")
	ckpt := t.TempDir()
	script := filepath.Join(repoRoot, "examples", "parameter_server", "ps_train.py")
	cmd := func(extra ...string) string {
		s := fmt.Sprintf("[%q, -u, %q, %q", pythonExec, script, "--ckpt-dir="+ckpt)
		for _, e := range extra {
			s += fmt.Sprintf(", %q", e)
		}
		return s + "]"
	}
	yaml := fmt.Sprintf(`apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: %s}
spec:
  distributionStrategy: ParameterServerStrategy
  envs: {TP_SOCKET_IFNAME: lo, GLOO_SOCKET_IFNAME: lo}
  replicaSpecs:
    ps: {replicas: 2, template: {spec: {containers: [{name: main, command: %s}]}}}
    chief: {replicas: 1, restartCount: 0, template: {spec: {containers: [{name: main, command: %s}]}}}
    worker: {replicas: 3, restartCount: 0, template: {spec: {containers: [{name: main, command: %s}]}}}
`, job, cmd(), cmd(), cmd("--steps="+strconv.Itoa(steps)))
	file := filepath.Join(t.TempDir(), "ps.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	s := submit(t, job, file)
	if code := s.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("rover submit exited with %d, want 0", code)
	}
	m := regexp.MustCompile(`chief: 3 workers done; held-out loss ([0-9.]+) -> ([0-9.]+)`).FindStringSubmatch(s.stdout.String())
	if m == nil {
		t.Fatalf("the chief did not report its loss:\n%s", s.stdout)
	}
	before, _ := strconv.ParseFloat(m[1], 64)
	after, _ := strconv.ParseFloat(m[2], 64)
	if !(after < before/10) {
		t.Errorf("held-out loss %v -> %v: the job did not train", before, after)
	}
	for j := range 2 {
		if _, err := os.Stat(filepath.Join(ckpt, fmt.Sprintf("ps-%d.pt", j))); err != nil {
			t.Errorf("PS %d saved no checkpoint: %v", j, err)
		}
	}
}
