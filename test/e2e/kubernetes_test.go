package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/kubenames"
	"github.com/roverml/rover/internal/operator"
	"github.com/roverml/rover/test/kubelet"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The test here runs the DDP example on Kubernetes the whole way: a real
// API server (envtest), the operator in-process, and the test kubelet
// (package test/kubelet) running the operator's master pod (`rover master
// --platform kubernetes`) and the master's worker pods (`rover run`) as
// local processes, with real PyTorch workers.

// kubeNamespace is where the Kubernetes jobs run.
const kubeNamespace = "train"

// kube is an API server with the operator and a test kubelet.
type kube struct {
	env  *k8stest.Env
	c    client.Client
	work string           // the kubelet's WorkDir: the pods' logs
	kl   *kubelet.Kubelet // the one node's kubelet
}

// startKube starts the API server, the operator and the kubelet, which
// runs the master pods of jobs (whose masters all listen on 29400, one at
// a time) and their workers with rover, Python and the admin's kubeconfig;
// extraRewrite adds to the kubelet's rewrites of addresses.
func startKube(t *testing.T, extraRewrite map[string]string, jobs ...string) *kube {
	t.Helper()
	s, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: s})
	k := &kube{env: env, c: env.Client, work: t.TempDir()}
	ctx := context.Background()
	if err := k.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNamespace}}); err != nil {
		t.Fatal(err)
	}

	logs, err := os.Create(filepath.Join(k.work, "operator-and-kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctrllog.SetLogger(logr.FromSlogHandler(logger.Handler())) // for what logs outside the manager
	cfg := operator.Config{MetricsAddr: "0", ProbeAddr: "0", Logger: logger.With("component", "operator")}
	cfg.Master.Image = "rover:e2e" // the kubelet runs rover from PATH
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- operator.Run(octx, env.Config, cfg) }()

	// Every worker pod's agent serves its metrics on the pod's port 9400
	// (ROVER_METRICS_ADDR); here the pods share one host, so each picks a
	// port of its own.
	rewrite := map[string]string{kubenames.MetricsAddr(): "127.0.0.1:0"}
	for _, job := range jobs {
		rewrite[kubenames.MasterAddr(job, kubeNamespace)] =
			fmt.Sprintf("127.0.0.1:%d", kubenames.MasterPort)
	}
	maps.Copy(rewrite, extraRewrite)
	base := append(os.Environ(),
		"PATH="+filepath.Dir(roverBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+t.TempDir(), "PYTHON_EXEC="+pythonExec, "PYTHONUNBUFFERED=1", "KUBECONFIG="+env.Kubeconfig)
	kl, err := kubelet.Start(ctx, kubelet.Options{
		Config: env.Config, NodeName: "node-0", Namespace: kubeNamespace, WorkDir: k.work,
		Env: base, Rewrite: rewrite, MaxGrace: 5 * time.Second, Logger: logger.With("component", "kubelet"),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	k.kl = kl
	t.Cleanup(func() {
		kl.Stop()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
		logs.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("---- operator and kubelet ----\n%s", lastLines(string(b), 80))
		}
	})
	return k
}

// ddpJob is the DDP example as an ElasticJob of two workers of two
// processes, with the job's files in dir.
func ddpJob(name, dir string, extra ...string) *elasticv1.ElasticJob {
	command := append([]string{"rover", "run", "--nnodes", "2"}, trainArgs(dir, extra...)...)
	return &elasticv1.ElasticJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubeNamespace},
		Spec: elasticv1.ElasticJobSpec{
			DistributionStrategy: "AllreduceStrategy",
			ReplicaSpecs: map[elasticv1.ReplicaType]*elasticv1.ReplicaSpec{
				elasticv1.Worker: {Replicas: new(int32(2)), RestartCount: new(int32(3)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "rover:e2e", WorkingDir: dir, Command: command}},
				}}},
			},
		},
	}
}

// pod reads pod name, nil when it does not exist.
func (k *kube) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	err := k.c.Get(context.Background(), client.ObjectKey{Namespace: kubeNamespace, Name: name}, &pod)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err != nil {
		return nil
	}
	return &pod
}

// running reports whether pod name runs.
func (k *kube) running(t *testing.T, name string) bool {
	t.Helper()
	p := k.pod(t, name)
	return p != nil && p.Status.Phase == corev1.PodRunning
}

// ranPods lists the names of job's pods of kind ("worker", "rover-master")
// that the kubelet ran, from their logs: the master deletes its worker
// pods once the job has ended.
func (k *kube) ranPods(job, kind string) []string {
	paths, _ := filepath.Glob(filepath.Join(k.work, kubeNamespace+"_"+job+"-"+kind+"-*.log"))
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), kubeNamespace+"_"), ".log"))
	}
	slices.Sort(names)
	return names
}

// job reads job name.
func (k *kube) job(t *testing.T, name string) *elasticv1.ElasticJob {
	t.Helper()
	var job elasticv1.ElasticJob
	if err := k.c.Get(context.Background(), client.ObjectKey{Namespace: kubeNamespace, Name: name}, &job); err != nil {
		t.Fatal(err)
	}
	return &job
}

// succeeded waits for job to end and returns it; it fails the test unless
// the job succeeded.
func (k *kube) succeeded(t *testing.T, job string) *elasticv1.ElasticJob {
	t.Helper()
	waitFor(t, jobTimeout, "the job to end", func() bool {
		p := k.job(t, job).Status.Phase
		return p == elasticv1.PhaseSucceeded || p == elasticv1.PhaseFailed
	})
	got := k.job(t, job)
	if got.Status.Phase != elasticv1.PhaseSucceeded {
		t.Fatalf("job phase %s, want Succeeded; conditions %+v", got.Status.Phase, got.Status.Conditions)
	}
	return got
}

// podLogs is the output of job's pods, for a failure's message.
func (k *kube) podLogs(job string) string {
	var b strings.Builder
	for _, pod := range append(k.ranPods(job, "rover-master"), k.ranPods(job, "worker")...) {
		out, _ := os.ReadFile(kubelet.LogPath(k.work, kubeNamespace, pod))
		fmt.Fprintf(&b, "---- %s ----\n%s\n", pod, lastLines(string(out), 60))
	}
	return b.String()
}

// TestKubernetes runs the DDP example as ElasticJobs on one API server,
// operator and kubelet (the operator's controller registers once per
// process): the disruptions of kubernetesDDP, the Events and conditions
// of kubernetesEvents, kubernetesScale, kubernetesDLRoverJob,
// kubernetesAutoScale, kubernetesRightSize, then
// kubernetesParameterServer.
func TestKubernetes(t *testing.T) {
	cases := ddpCases()
	var jobs []string
	for _, tc := range cases {
		jobs = append(jobs, tc.name)
	}
	k := startKube(t, psKubeRewrite(t), append(jobs, scaleJob, dlroverKubeJob, eventsJob, autoScaleKubeJob, rightSizeKubeJob, psKubeJob)...)
	t.Run("DDP", func(t *testing.T) { kubernetesDDP(t, k, cases) })
	t.Run("Events", func(t *testing.T) { kubernetesEvents(t, k) })
	t.Run("Scale", func(t *testing.T) { kubernetesScale(t, k) })
	t.Run("DLRoverJob", func(t *testing.T) { kubernetesDLRoverJob(t, k) })
	t.Run("AutoScale", func(t *testing.T) { kubernetesAutoScale(t, k) })
	t.Run("RightSize", func(t *testing.T) { kubernetesRightSize(t, k) })
	t.Run("ParameterServer", func(t *testing.T) { kubernetesParameterServer(t, k) })
}

// ddpCase is one run of kubernetesDDP.
type ddpCase struct {
	name    string
	disrupt func(t *testing.T, k *kube, job string)
	// workers and masters are the pods that ran, by their suffix.
	workers, masters []string
	// relaunches is the job's relaunch count of workers at the end.
	relaunches int32
}

// kubernetesDDP runs the two-node DDP example as an ElasticJob through
// the operator, its master pod and its worker pods: undisturbed; with a
// worker pod deleted at a random step after a checkpoint was committed
// (the master relaunches its rank as -worker-1-1); and with the master pod
// deleted likewise (the operator relaunches it as -rover-master-1, which
// adopts the running worker pods). Each job succeeds, as the operator
// reports it, with the weights of an uninterrupted `rover run` job.
func kubernetesDDP(t *testing.T, k *kube, cases []ddpCase) {
	clean := cleanRun(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.name
			defer func() {
				if t.Failed() {
					t.Logf("pods of %s:\n%s", job, k.podLogs(job))
				}
			}()
			dir := t.TempDir()
			store := filepath.Join(dir, "flash")
			saves := filepath.Join(dir, "saves.log")
			if err := k.c.Create(context.Background(), ddpJob(job, dir, "--flash", store, "--log-saves", saves, "--step-sleep", "0.1")); err != nil {
				t.Fatal(err)
			}
			committed := 0
			if tc.disrupt != nil {
				waitFor(t, jobTimeout, "a committed checkpoint", func() bool { return latestCommitted(store) >= 10 })
				waitStep(t, saves, 12+rand.IntN(17)) // a random step in 12..28
				committed = latestCommitted(store)
				tc.disrupt(t, k, job)
				t.Logf("disrupted the job with checkpoint step %d committed", committed)
			}
			got := k.succeeded(t, job)
			w := got.Status.ReplicaStatuses[elasticv1.Worker]
			if w == nil || w.Succeeded != 2 || w.Active != 0 || w.Failed != 0 {
				t.Errorf("worker status %+v, want 2 succeeded, none active or failed", w)
			}
			if got.Status.RelaunchCount != tc.relaunches {
				t.Errorf("job relaunch count %d, want %d", got.Status.RelaunchCount, tc.relaunches)
			}
			for kind, want := range map[string][]string{"worker": tc.workers, "rover-master": tc.masters} {
				var names []string
				for _, suffix := range want {
					names = append(names, job+"-"+kind+"-"+suffix)
				}
				if got := k.ranPods(job, kind); !slices.Equal(got, names) {
					t.Errorf("%s pods that ran: %v, want %v", kind, got, names)
				}
			}
			res := readResult(t, filepath.Join(dir, "out.json"))
			if res.Step != 60 || res.WorldSize != 4 {
				t.Fatalf("result: step %d world %d; want 60, 4", res.Step, res.WorldSize)
			}
			if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
				t.Errorf("weights differ from an uninterrupted run's by %g relative, want <= 1e-6", d)
			}
			if tc.relaunches > 0 {
				if resumed := resumedSteps(t, filepath.Join(dir, "world.log")); resumed < committed {
					t.Errorf("the job resumed from step %d, older than checkpoint step %d committed before the disruption", resumed, committed)
				}
			}
		})
	}
}

// ddpCases are kubernetesDDP's runs: undisturbed, a worker pod deleted,
// the master pod deleted.
func ddpCases() []ddpCase {
	return []ddpCase{
		{name: "undisturbed", workers: []string{"0-0", "1-0"}, masters: []string{"0"}},
		{name: "worker-deleted", workers: []string{"0-0", "1-0", "1-1"}, masters: []string{"0"}, relaunches: 1,
			disrupt: func(t *testing.T, k *kube, job string) {
				victim := job + "-worker-1-0"
				k.deletePod(t, victim)
				waitFor(t, jobTimeout, "the relaunched worker pod to run", func() bool {
					p := k.pod(t, job+"-worker-1-1")
					return p != nil && p.Labels[elasticv1.LabelRelaunchCount] == "1" &&
						(p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded)
				})
			}},
		{name: "master-deleted", workers: []string{"0-0", "1-0"}, masters: []string{"0", "1"},
			disrupt: func(t *testing.T, k *kube, job string) {
				k.deletePod(t, kubenames.MasterPod(job, 0))
				waitFor(t, jobTimeout, "the relaunched master pod to run", func() bool {
					return k.running(t, kubenames.MasterPod(job, 1))
				})
			}},
	}
}

// deletePod deletes pod name, as a user or an eviction would.
func (k *kube) deletePod(t *testing.T, name string) {
	t.Helper()
	waitFor(t, jobTimeout, name+" to run", func() bool { return k.running(t, name) })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: kubeNamespace, Name: name}}
	if err := k.c.Delete(context.Background(), pod); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
}

// scaleJob is kubernetesScale's job.
const scaleJob = "scale"

// kubernetesScale: a job of --nnodes=2:3 that starts two worker pods
// (replicas 2) is scaled to 3 with the /scale subresource (`kubectl scale
// elasticjob/scale --replicas=3`) while it trains: the master creates
// -worker-2-0, whose node joins the next round, and the job finishes in a
// world of 3 nodes of 2 processes, with no restart spent.
func kubernetesScale(t *testing.T, k *kube) {
	const job = scaleJob
	defer func() {
		if t.Failed() {
			t.Logf("pods of %s:\n%s", job, k.podLogs(job))
		}
	}()
	dir := t.TempDir()
	saves := filepath.Join(dir, "saves.log")
	ej := ddpJob(job, dir, "--flash", filepath.Join(dir, "flash"), "--log-saves", saves, "--step-sleep", "0.2", "--steps", "100")
	cmd := ej.Spec.ReplicaSpecs[elasticv1.Worker].Template.Spec.Containers[0].Command
	cmd[slices.Index(cmd, "--nnodes")+1] = "2:3"
	ctx := context.Background()
	if err := k.c.Create(ctx, ej); err != nil {
		t.Fatal(err)
	}
	waitStep(t, saves, 12)
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: kubeNamespace, Name: job}, Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
	if err := k.c.SubResource("scale").Update(ctx, ej, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scale the job to 3: %v", err)
	}
	waitFor(t, jobTimeout, "the third worker pod to run", func() bool { return k.running(t, job+"-worker-2-0") })
	got := k.succeeded(t, job)
	if w := got.Status.ReplicaStatuses[elasticv1.Worker]; w == nil || w.Succeeded != 3 || w.Failed != 0 {
		t.Errorf("worker status %+v, want 3 succeeded", w)
	}
	if got.Status.RestartCount != 0 || got.Status.RelaunchCount != 0 {
		t.Errorf("restarts %d, relaunches %d; a scale spends neither", got.Status.RestartCount, got.Status.RelaunchCount)
	}
	if pods := k.ranPods(job, "worker"); !slices.Equal(pods, []string{job + "-worker-0-0", job + "-worker-1-0", job + "-worker-2-0"}) {
		t.Errorf("worker pods that ran: %v", pods)
	}
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 100 || res.WorldSize != 6 {
		t.Fatalf("result: step %d world %d; want 100 in a world of 6", res.Step, res.WorldSize)
	}
}
