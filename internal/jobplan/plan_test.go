package jobplan

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/jobspec"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/platform"
)

// TestKubernetesPlan: replicas, the pending annotations and critical
// nodes' budgets reach the node manager's spec.
func TestKubernetesPlan(t *testing.T) {
	doc := `apiVersion: elastic.rover.dev/v1alpha1
kind: ElasticJob
metadata:
  name: mnist
  annotations: {pending_timeout: "120", pending_fail_strategy: "2"}
spec:
  replicaSpecs:
    worker:
      replicas: 2
      restartCount: 1
      criticalNodes: "0:4,1"
      template:
        spec:
          containers:
          - name: main
            image: train:1
            command: [dlrover-run, --nnodes=1:3, --nproc_per_node=2, train.py]
            resources: {limits: {memory: 4Gi}, requests: {memory: 2Gi}}
`
	spec, err := jobspec.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(*spec, Target{Capabilities: jobspec.KubernetesCapabilities, RoverExe: "rover"})
	if err != nil {
		t.Fatal(err)
	}
	g := p.Nodes.Groups[0]
	got := []any{g.MinNodes, g.Nodes, g.MaxNodes, g.RestartCount, g.CriticalRanks, g.RestartCounts, p.Nodes.PendingStrategy, p.Nodes.PendingTimeout.Seconds(), g.MemoryLimit}
	want := []any{1, 2, 3, 1, []int{0, 1}, map[int]int{0: 4}, nodemanager.PendingAll, 120.0, int64(4 << 30)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("min, nodes, max, restartCount, critical ranks, rank budgets, pending strategy, timeout, memory limit (-want +got):\n%s", diff)
	}
}

func TestPendingStrategy(t *testing.T) {
	for s, want := range map[int]nodemanager.PendingStrategy{-1: nodemanager.PendingSkip, 0: nodemanager.PendingSkip, 1: nodemanager.PendingNecessary, 2: nodemanager.PendingAll} {
		if got := pendingStrategy(s); got != want {
			t.Errorf("pendingStrategy(%d) = %v, want %v", s, got, want)
		}
	}
}

// TestEnvWithNULRefused: an env value no process can carry is refused when
// the job is read, naming it, instead of failing every node's start.
func TestEnvWithNULRefused(t *testing.T) {
	doc := "apiVersion: elastic.rover.dev/v1alpha1\nkind: ElasticJob\nmetadata: {name: nul}\nspec:\n  replicaSpecs:\n    worker:\n" +
		"      replicas: 1\n      template:\n        spec:\n          containers:\n          - name: main\n            image: train:1\n" +
		"            command: [dlrover-run, --nnodes=1, --no-python, \"true\"]\n            env: [{name: TOKEN, value: \"a\\0b\"}]\n"
	spec, err := jobspec.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(*spec, Target{Capabilities: jobspec.KubernetesCapabilities, RoverExe: "rover"})
	if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), "the value of TOKEN holds a NUL byte") {
		t.Fatalf("New = %v, want ErrBadSpec naming TOKEN's NUL byte", err)
	}
}

// TestShellLinePlan: a launcher inside a shell line runs through the shell
// with rover run in its place; locally the nodes start in the container's
// workingDir, where (after the line's cd) the script is looked up; every
// node gets NODE_NUM and WORKER_NUM.
func TestShellLinePlan(t *testing.T) {
	wd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(wd, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := func(script string) []byte {
		return []byte(`replicaSpecs:
  worker:
    replicas: 3
    template:
      spec:
        restartPolicy: OnFailure
        containers:
        - workingDir: ` + wd + `
          command: [/bin/bash, -c, "cd src && pip install -e . && dlrover-run --nnodes=$NODE_NUM --nproc_per_node=2 ` + script + `"]
`)
	}
	spec, err := jobspec.ParseFor(doc("train.py"), jobspec.LocalCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(*spec, Local("/opt/rover/rover")); err == nil || !strings.Contains(err.Error(), "the script train.py") {
		t.Fatalf("New without the script in workingDir/src: %v; want the script named", err)
	}
	if err := os.WriteFile(filepath.Join(wd, "src", "train.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := New(*spec, Local("/opt/rover/rover"))
	if err != nil {
		t.Fatal(err)
	}
	g := p.Nodes.Groups[0]
	want := []string{"/bin/sh", "-c", `cd -- "$0" && exec "$@"`, wd,
		"/bin/bash", "-c", "cd src && pip install -e . && /opt/rover/rover run --nnodes=$NODE_NUM --nproc_per_node=2 train.py"}
	if diff := cmp.Diff(want, g.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if g.MaxNodes != 3 || g.Env["NODE_NUM"] != "3" || g.Env["WORKER_NUM"] != "3" || p.Launch.NprocPerNode != 2 {
		t.Errorf("max nodes %d, env %v, nproc %d; want 3, NODE_NUM=WORKER_NUM=3, 2", g.MaxNodes, g.Env, p.Launch.NprocPerNode)
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "restartPolicy: OnFailure is run as Never") {
		t.Errorf("notes %q; want the restart policy's", p.Notes)
	}
	k8s, err := New(*spec, Target{Capabilities: jobspec.KubernetesCapabilities, RoverExe: "rover"})
	if err != nil {
		t.Fatal(err)
	}
	if got := k8s.Nodes.Groups[0].Argv; !slices.Equal(got, []string{"/bin/bash", "-c", "cd src && pip install -e . && rover run --nnodes=$NODE_NUM --nproc_per_node=2 train.py"}) {
		t.Errorf("Kubernetes argv %q", got)
	}
}

// TestResourceLimitsBoundRightSizing: on Kubernetes resourceLimits reaches
// the node manager, which right-sizes from the template's requests; the
// local platform, which reserves nothing, still refuses it.
func TestResourceLimitsBoundRightSizing(t *testing.T) {
	doc := "apiVersion: elastic.rover.dev/v1alpha1\nkind: ElasticJob\nmetadata: {name: sized}\nspec:\n" +
		"  resourceLimits: {cpu: 12, memory: 48Gi, nvidia.com/gpu: 8}\n  replicaSpecs:\n    worker:\n" +
		"      replicas: 2\n      template:\n        spec:\n          containers:\n          - name: main\n            image: train:1\n" +
		"            command: [dlrover-run, --nnodes=2:4, --no-python, \"true\"]\n" +
		"            resources: {requests: {cpu: 1500m, memory: 4Gi}}\n"
	spec, err := jobspec.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(*spec, Target{Capabilities: jobspec.KubernetesCapabilities, RoverExe: "rover"})
	if err != nil {
		t.Fatal(err)
	}
	got := []any{p.Nodes.RightSize, p.Nodes.ResourceLimits, p.Nodes.Groups[0].MilliCPU}
	want := []any{true, platform.Resources{MilliCPU: 12000, MemoryBytes: 48 << 30, GPUs: 8}, int64(1500)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("right-size, limits, CPU request (-want +got):\n%s", diff)
	}
	if _, err := New(*spec, Local("rover")); !errors.Is(err, jobspec.ErrUnsupported) || !strings.Contains(err.Error(), "resourceLimits") {
		t.Fatalf("local New = %v; want resourceLimits refused", err)
	}
}
