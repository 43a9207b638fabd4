package v1alpha1_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/jobspec"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// roverDoc reads a DLRover testdata file with its apiVersion changed to
// Rover's: the only change a DLRover user makes.
func roverDoc(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "apiVersion: "+v1alpha1.DLRoverAPIVersion, "apiVersion: "+v1alpha1.GroupVersion.String(), 1)
	if s == string(b) {
		t.Fatalf("testdata/%s has no DLRover apiVersion line", name)
	}
	return []byte(s)
}

// decodeStrict decodes YAML into an ElasticJob, refusing unknown fields:
// every field of the document has a place in the Go types.
func decodeStrict(t *testing.T, doc []byte) *v1alpha1.ElasticJob {
	t.Helper()
	var job v1alpha1.ElasticJob
	if err := yaml.UnmarshalStrict(doc, &job); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return &job
}

// asMap reads YAML or JSON into a generic value, for comparing documents.
func asMap(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// dropEmpty removes empty objects, which mean the same as absent ones.
func dropEmpty(v any) any {
	if m, ok := v.(map[string]any); ok {
		for k, e := range m {
			if em, ok := dropEmpty(e).(map[string]any); ok && len(em) == 0 {
				delete(m, k)
			}
		}
	}
	return v
}

// TestDLRoverJobsRoundTrip: DLRover's jobs, with only apiVersion changed,
// decode into the Go types with no field left over and encode back to the
// same document.
func TestDLRoverJobsRoundTrip(t *testing.T) {
	for _, name := range []string{"dlrover-torch-mnist.yaml", "dlrover-every-field.yaml"} {
		t.Run(name, func(t *testing.T) {
			doc := roverDoc(t, name)
			job := decodeStrict(t, doc)
			out, err := job.JobSpecDocument()
			if err != nil {
				t.Fatal(err)
			}
			want := asMap(t, doc)
			delete(want["spec"].(map[string]any), "brainService") // "" is left out
			if diff := cmp.Diff(dropEmpty(want), dropEmpty(asMap(t, out))); diff != "" {
				t.Errorf("round trip (-in +out):\n%s", diff)
			}
		})
	}
}

// TestJobSpecParsesTheDocument: the operator's path from an ElasticJob to
// the job Rover runs.
func TestJobSpecParsesTheDocument(t *testing.T) {
	job := decodeStrict(t, roverDoc(t, "dlrover-torch-mnist.yaml"))
	job.Default()
	doc, err := job.JobSpecDocument()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse(doc)
	if err != nil {
		t.Fatalf("jobspec.Parse: %v\n%s", err, doc)
	}
	w := spec.Replicas[jobspec.Worker]
	if spec.Name != "torch-mnist" || w.MinNodes != 3 || w.MaxNodes != 4 || w.NprocPerNode != 2 || w.RestartCount != 3 || spec.MaxRestarts != 3 {
		t.Errorf("got name %q nodes %d:%d nproc %d restartCount %d maxRestarts %d; want torch-mnist 3:4 2 3 3",
			spec.Name, w.MinNodes, w.MaxNodes, w.NprocPerNode, w.RestartCount, spec.MaxRestarts)
	}
}

// TestDefaultMatchesCRD: Default sets exactly the defaults the generated
// CRD declares for Rover's fields.
func TestDefaultMatchesCRD(t *testing.T) {
	b, err := os.ReadFile("../../../deploy/crd/elastic.rover.dev_elasticjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := asMap(t, b)
	var schema any = crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"]
	inCRD := map[string]any{}
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		if strings.HasSuffix(path, ".template") || strings.HasSuffix(path, ".valueFrom") {
			return // Kubernetes' own types: their defaults are the core API's
		}
		if d, ok := s["default"]; ok {
			inCRD[path] = d
		}
		if p, ok := s["properties"].(map[string]any); ok {
			for k, v := range p {
				walk(path+"."+k, v.(map[string]any))
			}
		}
		if a, ok := s["additionalProperties"].(map[string]any); ok {
			walk(path+".*", a)
		}
		if i, ok := s["items"].(map[string]any); ok {
			walk(path+"[]", i)
		}
	}
	walk("", schema.(map[string]any))

	job := &v1alpha1.ElasticJob{Spec: v1alpha1.ElasticJobSpec{ReplicaSpecs: map[v1alpha1.ReplicaType]*v1alpha1.ReplicaSpec{v1alpha1.Worker: {}}}}
	job.Default()
	fromGo := map[string]any{
		".spec.distributionStrategy":        job.Spec.DistributionStrategy,
		".spec.optimizeMode":                job.Spec.OptimizeMode,
		".spec.replicaSpecs.*.restartCount": float64(*job.Spec.ReplicaSpecs[v1alpha1.Worker].RestartCount),
	}
	if diff := cmp.Diff(inCRD, fromGo); diff != "" {
		t.Errorf("CRD defaults (-crd +Default):\n%s", diff)
	}

	// Default keeps what is set.
	five := int32(5)
	job = &v1alpha1.ElasticJob{Spec: v1alpha1.ElasticJobSpec{DistributionStrategy: "x", OptimizeMode: "y",
		ReplicaSpecs: map[v1alpha1.ReplicaType]*v1alpha1.ReplicaSpec{v1alpha1.Worker: {RestartCount: &five}}}}
	job.Default()
	if job.Spec.DistributionStrategy != "x" || job.Spec.OptimizeMode != "y" || *job.Spec.ReplicaSpecs[v1alpha1.Worker].RestartCount != 5 {
		t.Errorf("Default changed set fields: %+v", job.Spec)
	}
}

func TestEnvValueForms(t *testing.T) {
	tests := []struct {
		in, out string // out "" means the same as in
		want    v1alpha1.EnvValue
		valid   bool
	}{
		{in: `"WARN"`, want: v1alpha1.EnvValue{Value: "WARN"}, valid: true},
		{in: `1`, out: `"1"`, want: v1alpha1.EnvValue{Value: "1"}, valid: true},
		{in: `0.5`, out: `"0.5"`, want: v1alpha1.EnvValue{Value: "0.5"}, valid: true},
		{in: `true`, out: `"true"`, want: v1alpha1.EnvValue{Value: "true"}, valid: true},
		{in: `{"name":"A","value":"b"}`, want: v1alpha1.EnvValue{Name: "A", Value: "b"}, valid: true},
		{in: `{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}}`, valid: true},
		{in: `[1,2]`, valid: false},
		{in: `{"name":"A","value":[1]}`, valid: false},
	}
	for _, tt := range tests {
		var e v1alpha1.EnvValue
		if err := json.Unmarshal([]byte(tt.in), &e); err != nil {
			t.Errorf("Unmarshal(%s): %v", tt.in, err)
			continue
		}
		if e.Valid() != tt.valid {
			t.Errorf("Unmarshal(%s).Valid() = %v; want %v", tt.in, e.Valid(), tt.valid)
		}
		if tt.want != (v1alpha1.EnvValue{}) && !cmp.Equal(e, tt.want, cmp.AllowUnexported(v1alpha1.EnvValue{})) {
			t.Errorf("Unmarshal(%s) = %+v; want %+v", tt.in, e, tt.want)
		}
		out, err := json.Marshal(e)
		want := tt.out
		if want == "" {
			want = tt.in
		}
		if err != nil || string(out) != want {
			t.Errorf("Marshal(Unmarshal(%s)) = %s, %v; want %s", tt.in, out, err, want)
		}
	}
}

func FuzzEnvValue(f *testing.F) {
	for _, s := range []string{`"a"`, `1`, `true`, `null`, `{"name":"A","value":"b"}`, `[1]`, `{"value":{}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var e v1alpha1.EnvValue
		if json.Unmarshal([]byte(in), &e) != nil {
			return
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("Marshal(Unmarshal(%q)): %v", in, err)
		}
		var again v1alpha1.EnvValue
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("Unmarshal(%s): %v", out, err)
		}
		out2, _ := json.Marshal(again)
		if string(out) != string(out2) {
			t.Fatalf("not stable: %q -> %s -> %s", in, out, out2)
		}
	})
}

func TestSchemeAndDeepCopy(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ElasticJob", "ElasticJobList", "ScalePlan", "ScalePlanList"} {
		if !s.Recognizes(v1alpha1.GroupVersion.WithKind(kind)) {
			t.Errorf("scheme does not know %s", kind)
		}
	}
	job := decodeStrict(t, roverDoc(t, "dlrover-every-field.yaml"))
	cp := job.DeepCopy()
	if !cmp.Equal(job, cp, cmp.AllowUnexported(v1alpha1.EnvValue{})) {
		t.Fatal("DeepCopy differs")
	}
	*cp.Spec.ReplicaSpecs[v1alpha1.Worker].Replicas = 9
	cp.Spec.ReplicaSpecs[v1alpha1.Worker].Template.Spec.Containers[0].Command[0] = "x"
	if *job.Spec.ReplicaSpecs[v1alpha1.Worker].Replicas == 9 || job.Spec.ReplicaSpecs[v1alpha1.Worker].Template.Spec.Containers[0].Command[0] == "x" {
		t.Error("DeepCopy shares memory with the original")
	}
}

func TestLabels(t *testing.T) {
	got := v1alpha1.NodeLabels("mnist", v1alpha1.Worker, 7, 3, 1)
	want := map[string]string{
		"app": "dlrover", "elasticjob.dlrover/name": "mnist", "elasticjob.dlrover/replica-type": "worker",
		"elasticjob.dlrover/replica-index": "7", "elasticjob.dlrover/rank-index": "3", "elasticjob.dlrover/relaunch-count": "1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NodeLabels (-want +got):\n%s", diff)
	}
	if s := v1alpha1.WorkerSelector("mnist"); s != "app=dlrover,elasticjob.dlrover/name=mnist,elasticjob.dlrover/replica-type=worker" {
		t.Errorf("WorkerSelector = %q", s)
	}
	if diff := cmp.Diff(map[string]string{"elasticjob.dlrover/name": "mnist", "scale-type": "manual"}, v1alpha1.ManualScaleLabels("mnist")); diff != "" {
		t.Errorf("ManualScaleLabels (-want +got):\n%s", diff)
	}
	for p, done := range map[v1alpha1.JobPhase]bool{v1alpha1.PhaseSucceeded: true, v1alpha1.PhaseFailed: true, v1alpha1.PhaseRunning: false, v1alpha1.PhaseSuspended: false} {
		if p.Finished() != done {
			t.Errorf("%s.Finished() = %v", p, !done)
		}
	}
}

// TestDDPSample: deploy/samples/ddp-elasticjob.yaml decodes and is the job
// it says: 2 nodes of 2 processes running examples/ddp/train.py.
func TestDDPSample(t *testing.T) {
	b, err := os.ReadFile("../../../deploy/samples/ddp-elasticjob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := decodeStrict(t, b).JobSpecDocument()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse(doc)
	if err != nil {
		t.Fatalf("jobspec.Parse: %v", err)
	}
	w := spec.Replicas[jobspec.Worker]
	if w.MinNodes != 2 || w.MaxNodes != 2 || w.NprocPerNode != 2 || w.Image != "rover:latest" || w.Command[len(w.Command)-1] != "examples/ddp/train.py" {
		t.Errorf("got nodes %d:%d nproc %d image %q command %q; want 2:2 2 rover:latest [... examples/ddp/train.py]",
			w.MinNodes, w.MaxNodes, w.NprocPerNode, w.Image, w.Command)
	}
}

// TestNoKubernetesModule: the root module never requires k8s.io/kubernetes
// (the k8s.io/* staging libraries are enough).
func TestNoKubernetesModule(t *testing.T) {
	b, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "k8s.io/kubernetes ") {
		t.Error("go.mod requires k8s.io/kubernetes; use the k8s.io/* staging modules instead")
	}
}
