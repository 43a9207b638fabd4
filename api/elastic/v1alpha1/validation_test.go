package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/jobspec"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// kubeVersion is the Kubernetes release whose kube-apiserver and etcd the
// validation tests run, matching the k8s.io/* v0.37 libraries.
const kubeVersion = "v1.37.2"

// testbinHint says how to get the binaries.
const testbinHint = "build them with `make testbin` (branch k8s-testenv: kube-apiserver and etcd into $HOME/.cache/rover/testbin-" +
	kubeVersion + "), or set KUBEBUILDER_ASSETS to a folder that has them"

// assetsDir returns the folder with kube-apiserver and etcd: KUBEBUILDER_ASSETS,
// else $HOME/.cache/rover/testbin-v1.37.2. It fails the test, never skips it,
// when they are missing: the CRDs' validation is part of the API.
func assetsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "rover", "testbin-"+kubeVersion)
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("the ElasticJob validation tests need a real API server, and %s has no executable %s: %s", dir, name, testbinHint)
		}
	}
	return dir
}

// startAPIServer starts kube-apiserver and etcd with Rover's CRDs installed
// and returns a client that asks for strict field validation, as kubectl
// does.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assetsDir(t),
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the API server: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
	})
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

// jobspecDoc reads a job spec in DLRover's shape from internal/jobspec's
// testdata, with Rover's apiVersion.
func jobspecDoc(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "internal", "jobspec", "testdata", "dlrover", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "apiVersion: "+v1alpha1.DLRoverAPIVersion, "apiVersion: "+v1alpha1.GroupVersion.String(), 1)
	return []byte(strings.Replace(s, "  namespace: dlrover\n", "", 1))
}

// object reads a YAML document as an unstructured object named name in
// namespace default.
func object(t *testing.T, doc []byte, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		t.Fatalf("object: %v", err)
	}
	u.SetName(name)
	u.SetNamespace("default")
	return u
}

// dlroverPSJob is a parameter-server job as DLRover's examples write
// one, with Rover's apiVersion: ps and worker groups with resources, and
// a dlrover-master group whose container has only a name and a pull
// policy.
const dlroverPSJob = `apiVersion: elastic.rover.dev/v1alpha1
kind: ElasticJob
metadata:
  name: deepctr-manual-scale
spec:
  distributionStrategy: ParameterServerStrategy
  replicaSpecs:
    ps:
      autoScale: false
      replicas: 1
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              image: registry.example/deeprec:v2
              imagePullPolicy: Always
              command: [/bin/bash, -c, "cd ./criteo && python -m train --platform=Kubernetes"]
              resources:
                limits: {cpu: "2", memory: 3Gi}
                requests: {cpu: "2", memory: 3Gi}
    worker:
      autoScale: false
      replicas: 2
      template:
        spec:
          containers:
            - name: main
              image: registry.example/deeprec:v2
              imagePullPolicy: Always
              command: [/bin/bash, -c, "cd ./criteo && python -m train --platform=Kubernetes"]
              resources:
                limits: {cpu: "2", memory: 4Gi}
                requests: {cpu: "2", memory: 4Gi}
    dlrover-master:
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              imagePullPolicy: Always
`

// TestValidationOnAPIServer applies good and bad ElasticJobs to a real API
// server with the generated CRDs: what Rover cannot run is refused with a
// message naming the field, and DLRover's jobs with only the apiVersion
// changed are accepted.
func TestValidationOnAPIServer(t *testing.T) {
	c := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	strict := client.FieldValidation("Strict")
	mnist := string(roverDoc(t, "dlrover-torch-mnist.yaml"))

	t.Run("good", func(t *testing.T) {
		every := roverDoc(t, "dlrover-every-field.yaml")
		rover := strings.Replace(mnist, "  optimizeMode: single-job\n", `  optimizeMode: single-job
  envs: {NCCL_DEBUG: WARN, OMP_NUM_THREADS: 1, DEBUG: true, A: {name: A, value: b}}
  pendingTimeout: 600
`, 1)
		sample, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "samples", "ddp-elasticjob.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		docs := map[string]string{"dlrover-torch-mnist": mnist, "every-field": string(every), "rover-envs": rover, "ddp": string(sample),
			"dlrover-ps": dlroverPSJob}
		for _, name := range []string{"mnist-shell", "cd-and"} {
			docs[name] = string(jobspecDoc(t, name+".yaml"))
		}
		for name, doc := range docs {
			if err := c.Create(ctx, object(t, []byte(doc), name), strict); err != nil {
				t.Errorf("create %s: %v", name, err)
			}
		}
		if _, err := jobspec.ParseFor([]byte(dlroverPSJob), jobspec.KubernetesCapabilities); err != nil {
			t.Errorf("jobspec refuses the parameter-server job the API server accepts: %v", err)
		}
		// The server's defaults are Default's.
		var job v1alpha1.ElasticJob
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "rover-envs"}, &job); err != nil {
			t.Fatalf("get: %v", err)
		}
		want := job.DeepCopy()
		want.Default()
		if diff := cmp.Diff(want.Spec, job.Spec, cmp.AllowUnexported(v1alpha1.EnvValue{})); diff != "" || job.Spec.DistributionStrategy != v1alpha1.AllreduceStrategy {
			t.Errorf("server defaults differ from Default (-Default +server):\n%s", diff)
		}
		if got := job.Spec.Envs["OMP_NUM_THREADS"].Value; got != "1" {
			t.Errorf("envs.OMP_NUM_THREADS = %q; want 1", got)
		}
	})

	replace := func(old, new string) string {
		if !strings.Contains(mnist, old) {
			t.Fatalf("the sample has no %q", old)
		}
		return strings.Replace(mnist, old, new, 1)
	}
	const workerKey = "    worker:\n"
	bad := []struct {
		name string
		doc  string
		want []string // substrings of the server's error
	}{
		{"parameter server without ps", replace("AllreduceStrategy", "ParameterServerStrategy"),
			[]string{"replicaSpecs.ps is missing"}},
		{"unknown strategy", replace("AllreduceStrategy", "MirroredStrategy"),
			[]string{"spec.distributionStrategy", "must be AllreduceStrategy or ParameterServerStrategy"}},
		{"cluster mode", replace("single-job", "cluster"), []string{"spec.optimizeMode", "use single-job"}},
		{"brain service", replace("  optimizeMode: single-job\n", "  optimizeMode: single-job\n  brainService: brain:50001\n"),
			[]string{"spec.brainService", "optimizeMode cluster"}},
		{"ps", replace(workerKey, "    ps: {replicas: 1, template: {spec: {containers: [{name: main, image: x}]}}}\n"+workerKey),
			[]string{"spec", "ps, chief and evaluator run in ParameterServerStrategy jobs only"}},
		{"chief", replace(workerKey, "    chief: {}\n"+workerKey), []string{"ps, chief and evaluator run in ParameterServerStrategy jobs only"}},
		{"evaluator", replace(workerKey, "    evaluator: {replicas: 1}\n"+workerKey), []string{"ps, chief and evaluator run in ParameterServerStrategy jobs only"}},
		{"unknown type", replace(workerKey, "    trainer: {}\n"+workerKey), []string{"spec.replicaSpecs", "unknown replica type"}},
		{"no worker", replace(workerKey, "    workers:\n"), []string{"replicaSpecs.worker is missing"}},
		{"no replicaSpecs", "apiVersion: elastic.rover.dev/v1alpha1\nkind: ElasticJob\nspec: {suspend: true}\n", []string{"spec.replicaSpecs", "Required value"}},
		{"negative replicas", replace("replicas: 4", "replicas: -1"), []string{"spec.replicaSpecs.worker.replicas", "greater than or equal to 1"}},
		{"restartCount above 5", replace("restartCount: 3", "restartCount: 6"), []string{"spec.replicaSpecs.worker.restartCount", "less than or equal to 5"}},
		{"no containers", replace("          containers:\n", "          containers: []\n          initContainers:\n"),
			[]string{"replicaSpecs.worker.template.spec.containers is empty"}},
		{"min above max", replace("      replicas: 4\n", "      replicas: 4\n      minReplicas: 5\n      maxReplicas: 4\n"),
			[]string{"spec.replicaSpecs[worker].minReplicas", "minReplicas must not exceed maxReplicas"}},
		{"restartPolicy", replace("restartPolicy: Never", "restartPolicy: Sometimes"), []string{"template.spec.restartPolicy must be Never, Always or OnFailure"}},
		{"replicas above MaxNodes", replace("replicas: 4", "replicas: 10001"), []string{"spec.replicaSpecs.worker.replicas", "less than or equal to 10000"}},
		{"nprocPerNode above MaxNprocPerNode", replace("      replicas: 4\n", "      replicas: 4\n      nprocPerNode: 1025\n"), []string{"nprocPerNode", "less than or equal to 1024"}},
		{"priority", replace("      restartCount: 3\n", "      restartCount: 3\n      priority: urgent\n"), []string{"spec.replicaSpecs[worker].priority", "priority must be high, low"}},
		{"pendingTimeout", replace("  optimizeMode: single-job\n", "  optimizeMode: single-job\n  pendingTimeout: soon\n"), []string{"spec.pendingTimeout", "give seconds"}},
		{"env value", replace("  optimizeMode: single-job\n", "  optimizeMode: single-job\n  envs: {A: {name: A, value: [1]}}\n"), []string{"spec.envs.A.value"}},
		{"unknown field", replace("  optimizeMode: single-job\n", "  optimizeMode: single-job\n  maxRestart: 3\n"), []string{"unknown field", "spec.maxRestart"}},
	}
	for i, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			// The API server and Rover's own validation agree: what one
			// refuses, so does the other.
			if _, err := jobspec.Parse([]byte(tt.doc)); err == nil {
				t.Errorf("jobspec.Parse accepts what the API server refuses")
			}
			err := c.Create(ctx, object(t, []byte(tt.doc), fmt.Sprintf("bad-%d", i)), strict)
			if err == nil {
				t.Fatal("the API server accepted the job; want a refusal")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}

	t.Run("scale plan", func(t *testing.T) {
		plan := object(t, []byte(`apiVersion: elastic.rover.dev/v1alpha1
kind: ScalePlan
metadata:
  labels: {elasticjob.dlrover/name: torch-mnist, scale-type: manual}
spec:
  ownerJob: torch-mnist
  replicaResourceSpecs:
    worker: {replicas: 3, resource: {cpu: "2", memory: 4Gi}}
`), "scale-1")
		if err := c.Create(ctx, plan, strict); err != nil {
			t.Errorf("create: %v", err)
		}
		noOwner := object(t, []byte("apiVersion: elastic.rover.dev/v1alpha1\nkind: ScalePlan\nspec: {psHosts: [a]}\n"), "scale-2")
		if err := c.Create(ctx, noOwner, strict); err == nil || !strings.Contains(err.Error(), "spec.ownerJob") {
			t.Errorf("a plan without ownerJob: got %v; want a refusal naming spec.ownerJob", err)
		}
	})
}
