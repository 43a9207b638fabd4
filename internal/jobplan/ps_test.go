package jobplan

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/jobspec"
	"github.com/roverml/rover/internal/nodemanager"
)

func psDoc(chief bool) string {
	doc := `apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: ctr}
spec:
  distributionStrategy: ParameterServerStrategy
  envs: {SEED: "7"}
  replicaSpecs:
    worker: {replicas: 3, restartCount: 2, template: {spec: {containers: [{name: main, command: [python, w.py], env: [{name: A, value: b}]}]}}}
    ps: {replicas: 2, template: {spec: {containers: [{name: main, command: [python, ps.py], resources: {limits: {memory: 1Gi}}}]}}}
    evaluator: {replicas: 1, restartCount: 0, template: {spec: {containers: [{name: main, command: [python, e.py]}]}}}
`
	if chief {
		doc += "    chief: {replicas: 1, restartCount: 1, template: {spec: {containers: [{name: main, command: [python, c.py]}]}}}\n"
	}
	return doc
}

// TestParameterServerPlan: one agentless group per role, PS first, with
// the role's command as written; the chief decides the job, or the
// workers without one; PS and chief ranks are critical; the rendezvous
// nobody joins never times out.
func TestParameterServerPlan(t *testing.T) {
	p, err := Check([]byte(psDoc(true)), Target{Capabilities: jobspec.LocalCapabilities, RoverExe: "/bin/rover"})
	if err != nil {
		t.Fatal(err)
	}
	type group struct {
		Name                 string
		Nodes, Min, Restarts int
		Argv                 string
		Critical             []int
		Decides, Agentless   bool
		Memory               int64
		Env                  map[string]string
	}
	var got []group
	for _, g := range p.Nodes.Groups {
		got = append(got, group{g.Name, g.Nodes, g.MinNodes, g.RestartCount, strings.Join(g.Argv, " "), g.CriticalRanks, g.DecidesJob, g.Agentless, g.MemoryLimit, g.Env})
	}
	want := []group{
		{"ps", 2, 2, 3, "python ps.py", []int{0, 1}, false, true, 1 << 30, map[string]string{"SEED": "7"}},
		{"chief", 1, 1, 1, "python c.py", []int{0}, true, true, 0, map[string]string{"SEED": "7"}},
		{"worker", 3, 1, 2, "python w.py", nil, false, true, 0, map[string]string{"SEED": "7", "A": "b"}},
		{"evaluator", 1, 0, -1, "python e.py", nil, false, true, 0, map[string]string{"SEED": "7"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]Role{{"ps", 2, 2}, {"chief", 1, 1}, {"worker", 3, 3}, {"evaluator", 1, 1}}, p.Roles); d != "" {
		t.Errorf("roles (-want +got):\n%s", d)
	}
	if p.Launch != nil || p.Preset.Rendezvous.JoinTimeout != 0 || p.Preset.Rendezvous.MaxNodes != 7 {
		t.Errorf("launch %v, rendezvous %+v: want no launcher and a rendezvous of 7 nodes that never times out", p.Launch, p.Preset.Rendezvous)
	}

	p, err = Check([]byte(psDoc(false)), Target{Capabilities: jobspec.LocalCapabilities, RoverExe: "/bin/rover"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range p.Nodes.Groups {
		if g.DecidesJob != (g.Name == nodemanager.DefaultGroup) {
			t.Errorf("without a chief, group %s decides the job: %v; want only the workers", g.Name, g.DecidesJob)
		}
	}

	// Kubernetes runs the same roles, each as written (the pod's
	// container runs the command), the PS with their memory.
	p, err = Check([]byte(psDoc(true)), Kubernetes)
	if err != nil {
		t.Fatalf("Kubernetes: %v", err)
	}
	if d := cmp.Diff([]Role{{"ps", 2, 2}, {"chief", 1, 1}, {"worker", 3, 3}, {"evaluator", 1, 1}}, p.Roles); d != "" {
		t.Errorf("Kubernetes roles (-want +got):\n%s", d)
	}
	if g := p.Nodes.Groups[0]; g.Name != "ps" || !g.Agentless || strings.Join(g.Argv, " ") != "python ps.py" || g.MemoryLimit != 1<<30 {
		t.Errorf("Kubernetes ps group %+v", g)
	}
	noPS := Kubernetes
	noPS.Capabilities.ParameterServer = false
	if _, err = Check([]byte(psDoc(true)), noPS); !errors.Is(err, jobspec.ErrUnsupported) {
		t.Errorf("a platform without parameter-server jobs: %v, want ErrUnsupported", err)
	}
}

// TestParameterServerAutoScale: an auto-scaled ps group starts at
// replicas and may grow to maxReplicas, each with an address from the
// start and each a critical rank; the PS rule's settings take the knobs
// and the job's CPU shared by its most PS.
func TestParameterServerAutoScale(t *testing.T) {
	doc := strings.Replace(psDoc(true), "    ps: {replicas: 2, template: {spec: {containers: [{name: main, command: [python, ps.py], resources: {limits: {memory: 1Gi}}}]}}}",
		"    ps: {autoScale: true, replicas: 2, maxReplicas: 4, template: {spec: {containers: [{name: main, command: [python, ps.py], resources: {requests: {cpu: 500m}}}]}}}", 1)
	doc = strings.Replace(doc, "metadata: {name: ctr}", "metadata: {name: ctr, annotations: {elastic.rover.dev/auto-scale: \"ps-window=5s\"}}", 1)
	p, err := Check([]byte(doc), Target{Capabilities: jobspec.LocalCapabilities, RoverExe: "/bin/rover"})
	if err != nil {
		t.Fatal(err)
	}
	g := p.Nodes.Groups[0]
	if g.Name != "ps" || g.Nodes != 2 || g.MinNodes != 2 || g.MaxNodes != 4 || len(g.CriticalRanks) != 4 || g.MilliCPU != 500 {
		t.Errorf("ps group %+v: want 2 nodes growing to 4, all critical, 500m", g)
	}
	if p.Roles[0] != (Role{"ps", 2, 4}) {
		t.Errorf("ps role %+v", p.Roles[0])
	}
	if p.PSScale == nil || p.PSScale.MaxPS != 4 || p.PSScale.MaxMilliCPU != 0 || p.PSScale.Window != 5*time.Second {
		t.Errorf("PS rule %+v: want at most 4 PS, no CPU bound, a 5s window", p.PSScale)
	}
	// On Kubernetes, the job's resourceLimits bound each PS's CPU.
	doc = strings.Replace(doc, "  envs: {SEED: \"7\"}", "  envs: {SEED: \"7\"}\n  resourceLimits: {cpu: \"8\"}", 1)
	if p, err = Check([]byte(doc), Kubernetes); err != nil {
		t.Fatal(err)
	}
	if p.PSScale == nil || p.PSScale.MaxMilliCPU != 2000 {
		t.Errorf("PS rule %+v: want at most 2000m a PS (8 CPUs over 4 PS)", p.PSScale)
	}
}
