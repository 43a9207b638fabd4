package kubemaster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// BenchmarkRelaunch100Pods measures how long the master on a real API
// server takes to replace 100 worker pods that fail at once: from the
// first failure written (the burst of 100 takes part of the time) to when
// 100 replacement pods exist and are Running. A kubelet loop here plays
// every node, as 100 kubelets (or kwok) would, up to kubeletWorkers pods
// at a time: it binds each new pod and reports it Running; then it reports
// all 100 OOM-killed in one burst. DLRover's issue #1690 reports about 10
// minutes for 30 pods.
//
// The master runs with exactly the production client limits: Run builds
// every client through ClientConfig with Options.QPS and Burst left 0,
// as `rover master` does with its flags' defaults, replacing the test
// environment's own (QPS 1000, burst 2000). Only the benchmark's kubelet
// loop uses the test environment's client. The master's requests are
// counted on their way out (its config is wrapped, its limits are not
// touched), for the breakdown: the master's requests per replacement and
// when its creates went out.
//
//	go test ./internal/kubemaster -run '^$' -bench Relaunch100Pods -benchtime 3x
func BenchmarkRelaunch100Pods(b *testing.B) { benchRelaunch(b, Options{}) }

// kubeletWorkers is how many pods the benchmark's kubelet loop writes at
// once: 100 nodes' kubelets write in parallel; a few overlapping requests
// stand for them without the loop taking the cores the master needs.
const kubeletWorkers = 8

// benchRelaunch runs BenchmarkRelaunch100Pods with the master's options
// opts (Config, Namespace, Job, Listen, Token and Logger are set here).
func benchRelaunch(b *testing.B, opts Options) {
	const n = 100
	env := k8stest.Start(b, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: Scheme()})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	calls := newAPICalls()
	b.StopTimer()
	for i := range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		ns := fmt.Sprintf("bench-%d", i)
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		job := &elasticv1.ElasticJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
			Spec: elasticv1.ElasticJobSpec{ReplicaSpecs: map[elasticv1.ReplicaType]*elasticv1.ReplicaSpec{
				elasticv1.Worker: {Replicas: ptr(int32(n)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "main", Image: "rover:latest",
						Command: []string{"rover", "run", fmt.Sprintf("--nnodes=%d", n), "--no-python", "sleep", "3600"}}}}}}}}}
		if err := env.Client.Create(ctx, job); err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			o := opts
			o.Config, o.Namespace, o.Job, o.Listen = calls.wrap(env.Config), ns, job.Name, "127.0.0.1:0"
			o.Token, o.Logger = "0123456789abcdef0123456789abcdef", slog.New(slog.NewTextHandler(io.Discard, nil))
			done <- Run(ctx, o)
		}()
		running := func(relaunch string) int {
			list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: elasticv1.LabelRelaunchCount + "=" + relaunch})
			if err != nil {
				b.Fatal(err)
			}
			count := 0
			var pending []*corev1.Pod
			for i := range list.Items {
				p := &list.Items[i]
				if p.DeletionTimestamp != nil {
					continue
				}
				switch p.Status.Phase {
				case corev1.PodRunning:
					count++
				case corev1.PodPending, "":
					pending = append(pending, p)
				}
			}
			if err := eachPod(ctx, pending, func(p *corev1.Pod) error { return markRunning(ctx, cs, p) }); err != nil {
				b.Fatal(err)
			}
			return count
		}
		k8stest.WaitFor(b, "100 pods running", func() bool { return running("0") == n })

		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		calls.reset()
		b.StartTimer()
		start := time.Now()
		failed := make([]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			failed[i] = &list.Items[i]
		}
		if err := eachPod(ctx, failed, func(p *corev1.Pod) error { return markFailed(ctx, cs, p) }); err != nil {
			b.Fatal(err)
		}
		written := time.Since(start)
		k8stest.WaitFor(b, "100 replacements running", func() bool { return running("1") == n })
		took := time.Since(start)
		b.StopTimer()
		counts, creates := calls.snapshot()
		b.ReportMetric(took.Seconds(), "s-to-100-running")
		reportBreakdown(b, n, start, written, took, counts, creates)
		cancel()
		if err := <-done; err != nil {
			b.Fatalf("master: %v", err)
		}
	}
}

// reportBreakdown reports where a run's time went: the failures written,
// the master's first and last replacement create (its reaction), and the
// master's API requests per replacement, by kind.
func reportBreakdown(b *testing.B, n int, start time.Time, written, took time.Duration, counts map[string]int, creates []time.Time) {
	total := 0
	for _, c := range counts {
		total += c
	}
	b.ReportMetric(written.Seconds(), "s-failures-written")
	b.ReportMetric(float64(total)/float64(n), "master-requests/replacement")
	if len(creates) > 0 {
		first, last := slices.MinFunc(creates, time.Time.Compare).Sub(start), slices.MaxFunc(creates, time.Time.Compare).Sub(start)
		b.ReportMetric(first.Seconds(), "s-to-first-create")
		b.ReportMetric(last.Seconds(), "s-to-last-create")
		b.Logf("failures written in %v; the master's creates returned from %v to %v; all Running at %v; master requests per replacement:%s",
			written.Round(time.Millisecond), first.Round(time.Millisecond), last.Round(time.Millisecond), took.Round(time.Millisecond), describe(counts, n))
	}
}

func ptr[T any](v T) *T { return &v }

// eachPod runs fn on every pod, kubeletWorkers at a time, and returns the
// first error.
func eachPod(ctx context.Context, pods []*corev1.Pod, fn func(*corev1.Pod) error) error {
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(kubeletWorkers)
	for _, p := range pods {
		g.Go(func() error { return fn(p) })
	}
	return g.Wait()
}

// markRunning binds pod to a node and reports it Running, as a kubelet:
// the binding, then one patch of its status.
func markRunning(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) error {
	if pod.Spec.NodeName == "" {
		err := cs.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-0"}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("bind %s: %w", pod.Name, err)
		}
	}
	return patchStatus(ctx, cs, pod, corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}})
}

// markFailed reports pod's container OOM-killed, as a kubelet.
func markFailed(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) error {
	return patchStatus(ctx, cs, pod, corev1.PodFailed, corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}})
}

// patchStatus sets pod's phase and its container's state in one patch of
// its status, as a kubelet reports: no read first, no conflict to retry.
func patchStatus(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase, state corev1.ContainerState) error {
	body, err := json.Marshal(map[string]any{"status": corev1.PodStatus{Phase: phase,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: state}}}})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("report pod %s %s: %w", pod.Name, phase, err)
	}
	return nil
}
