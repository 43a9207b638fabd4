package kubernetes

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/platform"
)

// TestPlatform runs the platform against a real API server; the tests
// write pod status as a kubelet would.
func TestPlatform(t *testing.T) {
	c := startCluster(t)
	t.Run("create", func(t *testing.T) { testCreate(t, c) })
	t.Run("lifecycle", func(t *testing.T) { testLifecycle(t, c) })
	t.Run("replay", func(t *testing.T) { testReplay(t, c) })
	t.Run("forbidden", func(t *testing.T) { testForbidden(t, c) })
	t.Run("parameter server", func(t *testing.T) { testParameterServer(t, c) })
}

// testCreate: the pod Create makes, and what it refuses.
func testCreate(t *testing.T, c *cluster) {
	ctx := context.Background()
	p, job := c.newJob(t, "create", "train")
	spec := nodeSpec("train", 2, 1)
	spec.Resources.MemoryBytes = 3 << 30
	spec.Image = "train:v2"
	spec.AvoidHosts = []string{"bad-a", "bad-b"}
	if err := p.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pod, err := c.cs.CoreV1().Pods("create").Get(ctx, spec.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	wantLabels := map[string]string{
		"team": "ml", "app": "dlrover", elasticv1.LabelJobName: "train", elasticv1.LabelReplicaType: "worker",
		elasticv1.LabelReplicaIndex: "2", elasticv1.LabelRankIndex: "2", elasticv1.LabelRelaunchCount: "1",
	}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if pod.Annotations["note"] != "kept" {
		t.Errorf("annotations %v lack the template's", pod.Annotations)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "elastic.rover.dev/v1alpha1", Kind: "ElasticJob", Name: "train",
		UID: job.UID, Controller: new(true), BlockOwnerDeletion: new(true)}}
	if diff := cmp.Diff(wantOwner, pod.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", pod.Spec.RestartPolicy)
	}
	if group, rank, relaunch, ok := NodeFromPod(pod); !ok || group != "worker" || rank != 2 || relaunch != 1 {
		t.Errorf("NodeFromPod = %q, %d, %d, %v; want worker, 2, 1, true", group, rank, relaunch, ok)
	}

	main := pod.Spec.Containers[1]
	if main.Name != "main" || pod.Spec.Containers[0].Command != nil {
		t.Fatalf("containers %v: the sidecar was changed or main moved", pod.Spec.Containers)
	}
	if diff := cmp.Diff(spec.Argv, main.Command); diff != "" || main.Args != nil || main.Image != "train:v2" {
		t.Errorf("main runs %q %q in %s, want the agent's argv in train:v2 (%s)", main.Command, main.Args, main.Image, diff)
	}
	mem := resource.MustParse("3Gi")
	if r := main.Resources; !r.Requests.Memory().Equal(mem) || !r.Limits.Memory().Equal(mem) || !r.Requests.Cpu().Equal(resource.MustParse("1")) {
		t.Errorf("resources %+v, want memory 3Gi requested and limited, the template's cpu", r)
	}

	env := map[string]corev1.EnvVar{}
	var order []string
	for _, e := range main.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s given twice", e.Name)
		}
		env[e.Name] = e
		order = append(order, e.Name)
	}
	for name, want := range map[string]string{
		"FROM_TEMPLATE": "yes", "A_VAR": "1", "B_VAR": "2", "NODE_ID": spec.ID, "NODE_RANK": "2", "NODE_TYPE": "worker",
		"NODE_NUM": "4", "WORKER_NUM": "4", "WORKER_ID": "2", "ELASTIC_JOB_NAME": "train", "JOB_UID": string(job.UID), "ROVER_NODE_ID": spec.ID, "PET_NODE_RANK": "2",
		"ROVER_RELAUNCH_COUNT": "1", "ROVER_MASTER_ADDR": "train-rover-master.create.svc:29400",
		"DLROVER_MASTER_ADDR": "train-rover-master.create.svc:29400",
	} {
		if got := env[name]; got.Value != want || got.ValueFrom != nil {
			t.Errorf("env %s = %+v, want %q", name, got, want)
		}
	}
	if i, j := indexOf(order, "A_VAR"), indexOf(order, "B_VAR"); i > j {
		t.Errorf("spec env not sorted: %v", order)
	}
	wantToken := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "train-token"}, Key: "token"}}
	if diff := cmp.Diff(wantToken, env["ROVER_TOKEN"].ValueFrom); diff != "" || env["ROVER_TOKEN"].Value != "" {
		t.Errorf("ROVER_TOKEN must come from the Secret (-want +got):\n%s", diff)
	}
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_IP": "status.podIP", "NODE_IP": "status.hostIP"} {
		if f := env[name].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != path {
			t.Errorf("env %s = %+v, want the downward API's %s", name, env[name], path)
		}
	}

	wantAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"bad-a", "bad-b"}}},
		}}},
	}}
	if diff := cmp.Diff(wantAffinity, pod.Spec.Affinity); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}

	// Refusals.
	if err := p.Create(ctx, spec); !errors.Is(err, platform.ErrExists) {
		t.Errorf("Create of an existing pod: %v, want ErrExists", err)
	}
	other := nodeSpec("other", 0, 0)
	if err := p.Create(ctx, other); !errors.Is(err, platform.ErrInvalidSpec) {
		t.Errorf("Create for another job: %v, want ErrInvalidSpec", err)
	}
	bad := nodeSpec("train", 0, 0)
	bad.Argv = nil
	if err := p.Create(ctx, bad); !errors.Is(err, platform.ErrInvalidSpec) {
		t.Errorf("Create without argv: %v, want ErrInvalidSpec", err)
	}
	bad = nodeSpec("train", 0, 0)
	bad.Env = map[string]string{"1BAD=NAME": "x"}
	if err := p.Create(ctx, bad); !errors.Is(err, platform.ErrInvalidSpec) {
		t.Errorf("Create with an env name the API server refuses: %v, want ErrInvalidSpec", err)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
