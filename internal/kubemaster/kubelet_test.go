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
	"github.com/roverml/rover/internal/operator"
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
	jobs := []string{"tiny", "relaunch"}
	addrs, rewrite := map[string]string{}, map[string]string{}
	for _, job := range jobs {
		addrs[job] = freeAddr(t)
		rewrite[fmt.Sprintf("%s.%s.svc:%d", operator.MasterServiceName(job), ns, operator.MasterPort)] = addrs[job]
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

	for _, tc := range []struct {
		job    string
		script string
		// disrupt, when set, runs while the job does.
		disrupt func(t *testing.T, job string)
	}{
		{job: jobs[0], script: "echo ok"},
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
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: operator.TokenSecretName(tc.job), Namespace: ns},
				Data: map[string][]byte{operator.TokenKey: []byte("0123456789abcdef0123456789-" + tc.job)}}
			if err := env.Client.Create(ctx, secret); err != nil {
				t.Fatal(err)
			}
			job := tinyJob(ns, tc.job, tc.script)
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
