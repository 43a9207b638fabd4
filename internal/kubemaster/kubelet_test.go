package kubemaster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/kubenames"
	"github.com/roverml/rover/test/kubelet"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestJobRunsOnKubelet runs a tiny job the whole way on a real API server:
// the master (in-process, as `rover master --platform kubernetes`) creates
// the worker pods, the test kubelet (package test/kubelet) runs their
// `rover run` as local processes, and the job succeeds. In the second case
// a worker pod is deleted while it runs: the master relaunches its rank as
// -worker-1-1 and the job still succeeds.
func TestJobRunsOnKubelet(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "rover"), "github.com/roverml/rover/cmd/rover")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build rover: %v\n%s", err, out)
	}
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: Scheme()})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "train"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	jobs := []string{"tiny", "relaunch", "dlrover"}
	addrs, rewrite := map[string]string{}, map[string]string{}
	for _, job := range jobs {
		addrs[job] = freeAddr(t)
		rewrite[kubenames.MasterAddr(job, ns)] = addrs[job]
	}
	k, err := kubelet.Start(ctx, kubelet.Options{
		Config: env.Config, NodeName: "node-0", Namespace: ns, WorkDir: work,
		Env:     []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir()},
		Rewrite: rewrite, MaxGrace: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	wd, out := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(wd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "sub", "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		job    string
		script string
		// spec, when set, makes the job instead of tinyJob.
		spec func(ns, name string) *elasticv1.ElasticJob
		// disrupt, when set, runs while the job does.
		disrupt func(t *testing.T, job string)
		// check, when set, runs after the job succeeded.
		check func(t *testing.T, job string)
	}{
		{job: jobs[0], script: "echo ok"},
		{job: jobs[2], spec: func(ns, name string) *elasticv1.ElasticJob { return dlroverShapedJob(ns, name, wd, out) }, check: func(t *testing.T, job string) {
			for rank, want := range []string{"WORKER_ID=0 WORKER_NUM=2\n", "WORKER_ID=1 WORKER_NUM=2\n"} {
				b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("node-%d", rank)))
				if err != nil || string(b) != want {
					t.Errorf("node %d recorded %q (%v), want %q", rank, b, err, want)
				}
			}
		}},
		{job: jobs[1], script: "echo started; sleep 3; echo ok", disrupt: func(t *testing.T, job string) {
			pod := job + "-worker-1-0"
			k8stest.WaitFor(t, "worker 1 to start training", func() bool {
				b, _ := os.ReadFile(kubelet.LogPath(work, ns, pod))
				return strings.Contains(string(b), "started")
			})
			if err := cs.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			k8stest.WaitFor(t, "the relaunched pod to run", func() bool {
				p, err := cs.CoreV1().Pods(ns).Get(ctx, job+"-worker-1-1", metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return false
				}
				if err != nil {
					t.Fatal(err)
				}
				return p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded
			})
		}},
	} {
		t.Run(tc.job, func(t *testing.T) {
			addr := addrs[tc.job]
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kubenames.TokenSecret(tc.job), Namespace: ns},
				Data: map[string][]byte{kubenames.TokenKey: []byte("0123456789abcdef0123456789-" + tc.job)}}
			if err := env.Client.Create(ctx, secret); err != nil {
				t.Fatal(err)
			}
			job := tinyJob(ns, tc.job, tc.script)
			if tc.spec != nil {
				job = tc.spec(ns, tc.job)
			}
			if err := env.Client.Create(ctx, job); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- Run(rctx, Options{Config: env.Config, Namespace: ns, Job: job.Name, Listen: addr,
					Token: "0123456789abcdef0123456789-" + tc.job, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
					StatusEvery: 50 * time.Millisecond})
			}()
			if tc.disrupt != nil {
				tc.disrupt(t, tc.job)
			}
			if err := <-done; err != nil {
				t.Fatalf("master Run: %v\n%s", err, podLogs(work, ns, tc.job))
			}
			if rctx.Err() != nil {
				t.Fatalf("the job did not end in time\n%s", podLogs(work, ns, tc.job))
			}
			var got elasticv1.ElasticJob
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
				t.Fatal(err)
			}
			w := got.Status.ReplicaStatuses[elasticv1.Worker]
			// The master writes the counts; the phase is the operator's.
			if w == nil || w.Succeeded != 2 || w.Active != 0 || w.Pending != 0 {
				t.Errorf("job status workers %+v; want 2 succeeded, none active or pending\n%s", w, podLogs(work, ns, tc.job))
			}
			if tc.disrupt != nil && got.Status.RelaunchCount < 1 {
				t.Errorf("job status relaunch count %d, want at least 1", got.Status.RelaunchCount)
			}
			if tc.check != nil {
				tc.check(t, tc.job)
			}
		})
	}
}

// tinyJob is a job of two worker nodes of one process each that run
// script with sh.
func tinyJob(ns, name, script string) *elasticv1.ElasticJob {
	return &elasticv1.ElasticJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: elasticv1.ElasticJobSpec{
			DistributionStrategy: "AllreduceStrategy",
			ReplicaSpecs: map[elasticv1.ReplicaType]*elasticv1.ReplicaSpec{
				elasticv1.Worker: {Replicas: new(int32(2)), RestartCount: new(int32(3)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "rover:latest",
						Command: []string{"rover", "run", "--nnodes=2", "--nproc-per-node=1", "--no-python", "sh", "-c", script}}},
				}}},
			},
		},
	}
}

// dlroverShapedJob is a job as DLRover's examples write it: the launcher
// inside a shell line with cd, && and $NODE_NUM, a /dev/shm emptyDir,
// restartPolicy Always, a security context and a sidecar. Each node runs in
// wd/sub (its workingDir, then cd) and records its WORKER_ID and WORKER_NUM
// in out.
func dlroverShapedJob(ns, name, wd, out string) *elasticv1.ElasticJob {
	line := `cd sub && echo "WORKER_ID=$WORKER_ID WORKER_NUM=$WORKER_NUM" > "$OUT/node-$NODE_RANK" && ` +
		`dlrover-run --nnodes=$NODE_NUM --nproc_per_node=1 --no-python sh -c 'test -f marker && echo ok'`
	return &elasticv1.ElasticJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: elasticv1.ElasticJobSpec{
			DistributionStrategy: "AllreduceStrategy",
			ReplicaSpecs: map[elasticv1.ReplicaType]*elasticv1.ReplicaSpec{
				elasticv1.Worker: {Replicas: new(int32(2)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy:   corev1.RestartPolicyAlways,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: new(false)},
					Volumes: []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{
						EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
					Containers: []corev1.Container{
						{Name: "main", Image: "rover:latest", WorkingDir: wd, Command: []string{"/bin/bash", "-c", line},
							Env:          []corev1.EnvVar{{Name: "OUT", Value: out}},
							VolumeMounts: []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}}},
						{Name: "log-shipper", Image: "busybox", Command: []string{"sleep", "infinity"}},
					},
				}}},
			},
		},
	}
}

// freeAddr is a loopback address with a port that was free just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// podLogs is the output of job's pods, for a failure's message.
func podLogs(work, ns, job string) string {
	paths, _ := filepath.Glob(filepath.Join(work, ns+"_"+job+"-*.log"))
	var b strings.Builder
	for _, p := range paths {
		out, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(p), out)
	}
	return b.String()
}
