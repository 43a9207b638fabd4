package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/platform/platformtest"
)

// cluster is a real API server (no kubelet, no scheduler) shared by the
// subtests of one test; each job gets a namespace of its own.
type cluster struct {
	env *k8stest.Env
	cs  clientset.Interface
}

func startCluster(t *testing.T) *cluster {
	scheme := k8stest.NewScheme()
	if err := elasticv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: scheme})
	cs, err := clientset.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{env: env, cs: cs}
}

// template is a worker template with a sidecar before the training
// container, so that "main" has to be found by name.
func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "ml"}, Annotations: map[string]string{"note": "kept"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "logs", Image: "busybox"},
			{
				Name: "main", Image: "train:v1", Command: []string{"dlrover-run", "train.py"},
				Env: []corev1.EnvVar{{Name: "FROM_TEMPLATE", Value: "yes"}, {Name: "NODE_ID", Value: "overridden"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			},
		}},
	}
}

// newJob makes a namespace, an ElasticJob and its token Secret, and returns
// a platform for the job.
func (c *cluster) newJob(t *testing.T, ns, name string) (*Platform, *elasticv1.ElasticJob) {
	t.Helper()
	ctx := context.Background()
	if err := c.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	job := &elasticv1.ElasticJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: elasticv1.ElasticJobSpec{ReplicaSpecs: map[elasticv1.ReplicaType]*elasticv1.ReplicaSpec{
			elasticv1.Worker: {Template: template()},
		}},
	}
	if err := c.env.Client.Create(ctx, job); err != nil {
		t.Fatalf("create ElasticJob: %v", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-token"}, StringData: map[string]string{"token": "s3cret"}}
	if err := c.env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	return c.platform(t, job), job
}

func (c *cluster) platform(t *testing.T, job *elasticv1.ElasticJob) *Platform {
	t.Helper()
	opts := JobOptions(job)
	opts.Client = c.cs
	opts.MasterAddr = fmt.Sprintf("%s-rover-master.%s.svc:29400", job.Name, job.Namespace)
	opts.TokenSecret = job.Name + "-token"
	opts.NodeNum = 4
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func nodeSpec(job string, rank, relaunch int) platform.NodeSpec {
	return platform.NodeSpec{
		Job: job, Group: "worker", Rank: rank, Relaunch: relaunch,
		ID:   fmt.Sprintf("%s-worker-%d-%d", job, rank, relaunch),
		Argv: []string{"rover", "run", "--nnodes=1:4", "train.py"},
		Env:  map[string]string{"B_VAR": "2", "A_VAR": "1"},
	}
}

func watch(t *testing.T, p *Platform) *platformtest.Recorder {
	t.Helper()
	return platformtest.Record(t, p)
}

// setStatus writes the pod's status as a kubelet would.
func (c *cluster) setStatus(t *testing.T, ns, name string, edit func(*corev1.PodStatus)) {
	t.Helper()
	ctx := context.Background()
	pod, err := c.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edit(&pod.Status)
	if _, err := c.cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update the status of pod %s: %v", name, err)
	}
}

// bind places the pod on a node, as the scheduler would.
func (c *cluster) bind(t *testing.T, ns, name, node string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := c.cs.CoreV1().Pods(ns).Bind(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind pod %s to %s: %v", name, node, err)
	}
}

func mainStatus(s corev1.ContainerState) []corev1.ContainerStatus {
	return []corev1.ContainerStatus{{Name: "main", Image: "train:v1", State: s}}
}
