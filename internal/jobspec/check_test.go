package jobspec

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckLocal(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings; none means Check passes
	}{
		{"local spec passes", readTestdata(t, "local.yaml"), nil},
		{"reference example", readTestdata(t, "torch-mnist.yaml"), []string{
			"the local platform runs processes on this machine: it cannot honour spec.replicaSpecs.worker.template.spec.containers[0].image (the nodes would run this machine's python and script, not the image's); remove it or submit to Kubernetes",
		}},
		{"more nodes than the local platform runs", "replicaSpecs: {worker: {replicas: 65, template: {spec: {containers: [{command: [x]}]}}}}", []string{
			"replicaSpecs.worker.replicas: 65 nodes is above its limit of 64 nodes per group",
		}},
		{"auto-scaling: the master decides", "replicaSpecs: {worker: {replicas: 1, autoScale: true, template: {spec: {containers: [{command: [x]}]}}}}", nil},
		{"other replica types and scheduling", `
suspend: true
resourceLimits: {cpu: 8}
replicaSpecs:
  worker: {priority: 0.5, autoScale: true, restartTimeout: 30, criticalNodes: "0", template: {spec: {containers: [{command: [x]}]}}}
  evaluator: {template: {spec: {containers: [{command: [x]}]}}}`, []string{
			"cannot honour suspend;", "cannot honour resourceLimits;", "replicaSpecs.worker.priority",
			"replicaSpecs.worker.restartTimeout", "replicaSpecs.worker.criticalNodes", "replicaSpecs.evaluator: an AllreduceStrategy job runs worker groups only",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = spec.Check(LocalCapabilities)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Check = %v; want ErrUnsupported", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestCheckKubernetesLike(t *testing.T) {
	spec, err := Parse([]byte(readTestdata(t, "torch-mnist.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	k8s := Capabilities{Platform: "k8s", Instead: "x", ReplicaTypes: []ReplicaType{Worker}, Images: true,
		Resources: []string{CPU, Memory, GPU}, Scheduling: true, CriticalNodes: true, LauncherFeatures: []string{"network-check"}}
	if err := spec.Check(k8s); err != nil {
		t.Errorf("Check: %v", err)
	}
}

// TestParameterServerSpec: a DLRover-style ParameterServerStrategy job
// parses into its four groups, each running its command as written, and
// the local platform and Kubernetes accept it; a platform without
// parameter-server jobs refuses it.
func TestParameterServerSpec(t *testing.T) {
	spec, err := ParseFor([]byte(readTestdata(t, "ps-local.yaml")), LocalCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	if !spec.IsParameterServer() {
		t.Fatalf("strategy %q", spec.Strategy)
	}
	want := map[ReplicaType]struct {
		nodes, restarts int
		cmd             string
	}{
		PS:     {2, 3, "python -u ps_train.py"},
		Chief:  {1, 1, "python -u ps_train.py"},
		Worker: {3, 3, "python -u ps_train.py --steps=20"},
	}
	if len(spec.Replicas) != len(want) {
		t.Fatalf("groups %v", spec.Replicas)
	}
	for typ, w := range want {
		g := spec.Replicas[typ]
		if g == nil {
			t.Fatalf("no %s group", typ)
		}
		if g.Nodes != w.nodes || g.MinNodes != w.nodes || g.MaxNodes != w.nodes || g.RestartCount != w.restarts || strings.Join(g.Command, " ") != w.cmd || g.Launch != nil {
			t.Errorf("%s: nodes %d (%d..%d), restarts %d, command %q, launch %v; want %+v", typ, g.Nodes, g.MinNodes, g.MaxNodes, g.RestartCount, g.Command, g.Launch, w)
		}
	}
	if err := spec.Check(KubernetesCapabilities); err != nil {
		t.Errorf("Kubernetes: %v", err)
	}
	noPS := KubernetesCapabilities
	noPS.ParameterServer = false
	err = spec.Check(noPS)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "distributionStrategy: ParameterServerStrategy (parameter-server jobs are not implemented here yet)") {
		t.Errorf("a platform without parameter-server jobs: %v", err)
	}
}
