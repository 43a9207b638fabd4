package kubemaster

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ddpJob is the DDP sample of deploy/samples, without its resources, in ns.
func ddpJob(t *testing.T, ns string) *elasticv1.ElasticJob {
	t.Helper()
	b, err := readRepoFile(t, "deploy/samples/ddp-elasticjob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var job elasticv1.ElasticJob
	if err := yaml.UnmarshalStrict(b, &job); err != nil {
		t.Fatal(err)
	}
	job.Namespace = ns
	return &job
}

// livePods lists the names of job's pods in ns that are not being deleted,
// sorted.
func livePods(t *testing.T, cs kubernetes.Interface, ns, job string) []string {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: elasticv1.LabelJobName + "=" + job})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names
}

func readRepoFile(t *testing.T, rel string) ([]byte, error) {
	return os.ReadFile(filepath.Join(k8stest.RepoRoot(t), rel))
}

// TestMasterRunsElasticJob: on a real API server, `rover master --platform
// kubernetes` reads the ElasticJob, creates its worker pods with the
// agent's command, relaunches a pod that was OOM-killed with the next
// relaunch count, writes the job's status, leaves the pods when it stops,
// and a master started again, on the state it kept in the API server,
// adopts them without creating any.
func TestMasterRunsElasticJob(t *testing.T) {
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: Scheme()})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "train"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	job := ddpJob(t, ns)
	twoGi := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
	job.Spec.ReplicaSpecs[elasticv1.Worker].Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: twoGi, Limits: twoGi}
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	run := func() (stop func() error) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(rctx, Options{Config: env.Config, Namespace: ns, Job: job.Name, Listen: "127.0.0.1:0",
				Token: "secret", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				StatusEvery: 50 * time.Millisecond, MetricsAddr: "127.0.0.1:0"})
		}()
		return func() error { cancel(); return <-done }
	}
	pods := func() []string { return livePods(t, cs, ns, job.Name) }
	stop := run()
	k8stest.WaitFor(t, "the two worker pods", func() bool { return slices.Equal(pods(), []string{"ddp-worker-0-0", "ddp-worker-1-0"}) })
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "ddp-worker-1-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	main := pod.Spec.Containers[0]
	if got := strings.Join(main.Command, " "); got != "rover run --nnodes=2 --nproc-per-node=2 --max-restarts=3 examples/ddp/train.py" {
		t.Errorf("worker command %q", got)
	}
	envs := map[string]string{}
	for _, e := range main.Env {
		envs[e.Name] = e.Value
	}
	if envs["ROVER_MASTER_ADDR"] != "ddp-rover-master.train.svc:29400" || envs["PET_NODE_RANK"] != "1" || envs["ROVER_NODE_ID"] != "ddp-worker-1-0" {
		t.Errorf("worker env %v", envs)
	}
	// A master with metrics has its agents serve theirs on the pods' port
	// "metrics", which Prometheus's annotations name.
	if envs["ROVER_METRICS_ADDR"] != "0.0.0.0:9400" || !slices.ContainsFunc(main.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "metrics" && p.ContainerPort == 9400
	}) || pod.Annotations["prometheus.io/scrape"] != "true" || pod.Annotations["prometheus.io/port"] != "9400" {
		t.Errorf("worker pod's metrics: ROVER_METRICS_ADDR %q, ports %v, annotations %v", envs["ROVER_METRICS_ADDR"], main.Ports, pod.Annotations)
	}

	// The kubelet reports the pod OOM-killed: the master relaunches it.
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	k8stest.WaitFor(t, "the relaunched pod", func() bool { return slices.Contains(pods(), "ddp-worker-1-1") })
	relaunched, err := cs.CoreV1().Pods(ns).Get(ctx, "ddp-worker-1-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := relaunched.Labels; l[elasticv1.LabelRelaunchCount] != "1" || l[elasticv1.LabelRankIndex] != "1" {
		t.Errorf("relaunched pod labels %v, want rank-index 1, relaunch-count 1", l)
	}
	// OOMKilled: DLRover's rule, twice the memory (at most 8 GiB more).
	if lim := relaunched.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; lim.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("relaunched pod's memory limit %s, want 4Gi (the OOM-killed pod had 2Gi)", lim.String())
	}
	if lim := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; lim.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("first pod's memory limit %s, want the template's 2Gi", lim.String())
	}
	var got elasticv1.ElasticJob
	k8stest.WaitFor(t, "the job's status to count the relaunch", func() bool {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			t.Fatal(err)
		}
		w := got.Status.ReplicaStatuses[elasticv1.Worker]
		return got.Status.RelaunchCount == 1 && w != nil && w.Initial == 2
	})

	// A master that stops leaves the pods; the next adopts them.
	if err := stop(); err != nil {
		t.Fatalf("master Run: %v", err)
	}
	before := pods()
	stop = run()
	defer stop()
	k8stest.WaitFor(t, "the second master's status", func() bool {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(job), &got)
		return got.Status.RelaunchCount == 1
	})
	if after := pods(); !slices.Equal(before, after) {
		t.Errorf("pods %v after the master's restart, want %v", after, before)
	}
	// The state is in the API server, owned by the job.
	var head corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: StateName(job.Name)}, &head); err != nil {
		t.Fatalf("the master's state: %v", err)
	}
	if refs := head.OwnerReferences; len(refs) != 1 || refs[0].UID != job.UID {
		t.Errorf("the state's owner references %v, want the job", refs)
	}
}
