package kubemaster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// BenchmarkRelaunch100Pods measures how long the master on a real API
// server takes to replace 100 worker pods that fail at once: from the
// first failure written (the burst of 100 takes part of the time) to when
// 100 replacement pods exist and are Running. A kubelet loop here plays every node: it binds each
// new pod and reports it Running (as kwok or a kubelet would); then it
// reports all 100 OOM-killed in one burst. DLRover's issue #1690 reports
// about 10 minutes for 30 pods.
//
// The master runs with exactly the production client limits: Run builds
// every client through ClientConfig with Options.QPS and Burst left 0,
// as `rover master` does with its flags' defaults, replacing the test
// environment's own (QPS 1000, burst 2000). Only the benchmark's kubelet
// loop uses the test environment's client.
//
//	go test ./internal/kubemaster -run '^$' -bench Relaunch100Pods -benchtime 3x
func BenchmarkRelaunch100Pods(b *testing.B) { benchRelaunch(b, Options{}) }

// benchRelaunch runs BenchmarkRelaunch100Pods with the master's options
// opts (Config, Namespace, Job, Listen, Token and Logger are set here).
func benchRelaunch(b *testing.B, opts Options) {
	const n = 100
	env := k8stest.Start(b, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: Scheme()})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
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
			o.Config, o.Namespace, o.Job, o.Listen = env.Config, ns, job.Name, "127.0.0.1:0"
			o.Token, o.Logger = "0123456789abcdef0123456789abcdef", slog.New(slog.NewTextHandler(io.Discard, nil))
			done <- Run(ctx, o)
		}()
		running := func(relaunch string) int {
			list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: elasticv1.LabelRelaunchCount + "=" + relaunch})
			if err != nil {
				b.Fatal(err)
			}
			count := 0
			for _, p := range list.Items {
				if p.DeletionTimestamp != nil {
					continue
				}
				switch p.Status.Phase {
				case corev1.PodRunning:
					count++
				case corev1.PodPending, "":
					if err := markRunning(ctx, cs, &p); err != nil {
						b.Fatal(err)
					}
				}
			}
			return count
		}
		k8stest.WaitFor(b, "100 pods running", func() bool { return running("0") == n })

		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		for _, p := range list.Items {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}
			if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		k8stest.WaitFor(b, "100 replacements running", func() bool { return running("1") == n })
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(took.Seconds(), "s-to-100-running")
		cancel()
		if err := <-done; err != nil {
			b.Fatalf("master: %v", err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// markRunning binds pod to a node and reports it Running, as a kubelet.
func markRunning(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) error {
	if pod.Spec.NodeName == "" {
		err := cs.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-0"}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("bind %s: %w", pod.Name, err)
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		_, err = cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}
