package jobspec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDLRoverShapes parses job specs in the shapes of DLRover's published
// examples (only apiVersion would change): each parses, Kubernetes runs it
// as written, and the local platform, once the image is removed, runs it
// with warnings for what it ignores.
func TestDLRoverShapes(t *testing.T) {
	tests := []struct {
		file       string
		launchArgs []string
		shellDir   string
		min, max   int
		nodes      int
		notes      []string // substrings of the local platform's notes
	}{{
		file:       "mnist-shell.yaml",
		launchArgs: []string{"--network-check", "--nnodes=2", "--nproc_per_node=2", "--max_restarts=1", "train.py"},
		min:        2, max: 2, nodes: 2,
		notes: []string{
			"spec.replicaSpecs.worker.template.spec.restartPolicy: Always is run as Never",
			"spec.replicaSpecs.worker.template.spec.volumes: ignored",
			"containers[0].volumeMounts: ignored",
			"containers[0].imagePullPolicy: ignored",
			"containers[0].resources.limits.cpu: ignored",
		},
	}, {
		file:       "cd-and.yaml",
		launchArgs: []string{"--nnodes=1:3", "--nproc_per_node=1", "train.py", "--epochs", "2"},
		shellDir:   "examples/nanogpt",
		min:        1, max: 3, nodes: 3,
		notes: []string{
			"spec.replicaSpecs.worker.template.metadata: ignored",
			"template.spec.initContainers: ignored", "template.spec.nodeSelector: ignored",
			"template.spec.securityContext: ignored", "template.spec.tolerations: ignored",
			"containers[0].envFrom: ignored", "containers[0].securityContext: ignored",
			"containers[0].env[0].valueFrom (POD_IP): ignored",
			`containers[1] (the sidecar container "log-shipper"): ignored`,
			"--node_rank=$NODE_RANK depends on $NODE_RANK, not known before the job runs (it differs per node)",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			doc := readTestdata(t, "dlrover/"+tt.file)
			spec, err := Parse([]byte(doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			g := spec.Replicas[Worker]
			if diff := cmp.Diff(tt.launchArgs, g.LaunchArgs); diff != "" {
				t.Errorf("launch args (-want +got):\n%s", diff)
			}
			if g.Shell == nil || g.Shell.Dir != tt.shellDir {
				t.Errorf("shell line %+v, want one that runs in %q", g.Shell, tt.shellDir)
			}
			if g.MinNodes != tt.min || g.MaxNodes != tt.max || g.Nodes != tt.nodes {
				t.Errorf("nodes %d..%d starting %d, want %d..%d starting %d", g.MinNodes, g.MaxNodes, g.Nodes, tt.min, tt.max, tt.nodes)
			}
			if err := spec.Check(KubernetesCapabilities); err != nil {
				t.Errorf("Kubernetes: %v", err)
			}
			for _, n := range spec.Notes(KubernetesCapabilities) {
				if strings.Contains(n, "ignored") {
					t.Errorf("Kubernetes ignores something: %s", n)
				}
			}
			local := strings.Replace(doc, "image: registry.example/", "# image: registry.example/", 1)
			spec, err = ParseFor([]byte(local), LocalCapabilities)
			if err != nil {
				t.Fatalf("local: %v", err)
			}
			notes := strings.Join(spec.Notes(LocalCapabilities), "\n")
			for _, want := range tt.notes {
				if !strings.Contains(notes, want) {
					t.Errorf("local notes lack %q:\n%s", want, notes)
				}
			}
		})
	}
}

// TestParseForReportsAll: a spec's own problems and the platform's come
// in one error.
func TestParseForReportsAll(t *testing.T) {
	doc := `replicaSpecs:
  worker:
    replicas: 2
    bogus: 1
    template: {spec: {containers: [{image: x, command: [dlrover-run, --nnodes=2, --auto-config, t.py]}]}}`
	_, err := ParseFor([]byte(doc), LocalCapabilities)
	if err == nil {
		t.Fatal("ParseFor succeeded")
	}
	for _, want := range []string{"replicaSpecs.worker.bogus: unknown field", "containers[0].image", "--auto-config"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestScalePlanNamed(t *testing.T) {
	doc := `apiVersion: elastic.iml.github.io/v1alpha1
kind: ScalePlan
metadata: {name: s, labels: {elasticjob.dlrover/name: j, scale-type: manual}}
spec:
  ownerJob: j
  replicaResourceSpecs: {worker: {replicas: 3}}`
	_, err := Parse([]byte(doc))
	if err == nil || !strings.HasPrefix(err.Error(), "kind: ScalePlan is DLRover's request to scale a running job") || strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("Parse of a ScalePlan: %v; want only that it is a ScalePlan", err)
	}
}
