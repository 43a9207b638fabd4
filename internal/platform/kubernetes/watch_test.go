package kubernetes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/platform"
)

// testLifecycle drives pods through the states a kubelet reports and
// checks the events Watch makes of them.
func testLifecycle(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns = "lifecycle"
	p, _ := c.newJob(t, ns, "job")
	r := watch(t, p)
	r.WaitFor(t, "Synced", func(e platform.Event) bool { return e.Kind == platform.Synced })
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	terminated := func(code int32, reason string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: metav1.Now(), FinishedAt: metav1.Now()}}
	}

	// Pending, placed, pulling, running, OOM-killed.
	oom := nodeSpec("job", 0, 0)
	if err := p.Create(ctx, oom); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, oom.ID, platform.Pending)
	c.bind(t, ns, oom.ID, "host-a")
	r.WaitFor(t, "Pending on host-a", func(e platform.Event) bool { return e.NodeID == oom.ID && e.Host == "host-a" })
	c.setStatus(t, ns, oom.ID, func(s *corev1.PodStatus) {
		s.ContainerStatuses = mainStatus(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})
	})
	r.WaitFor(t, "Pending with a reason", func(e platform.Event) bool { return e.NodeID == oom.ID && e.Reason == "ContainerCreating" })
	c.setStatus(t, ns, oom.ID, func(s *corev1.PodStatus) {
		s.Phase, s.PodIP, s.ContainerStatuses = corev1.PodRunning, "10.0.0.7", mainStatus(running)
	})
	r.WaitKind(t, oom.ID, platform.Running)
	// A change that changes no state (a label) reports nothing.
	patch := []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
	if _, err := c.cs.CoreV1().Pods(ns).Patch(ctx, oom.ID, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.setStatus(t, ns, oom.ID, func(s *corev1.PodStatus) {
		s.Phase, s.ContainerStatuses = corev1.PodFailed, mainStatus(terminated(137, "OOMKilled"))
	})
	r.WaitKind(t, oom.ID, platform.Exited)
	want := []platform.Event{
		{NodeID: oom.ID, Kind: platform.Pending},
		{NodeID: oom.ID, Kind: platform.Pending, Host: "host-a"},
		{NodeID: oom.ID, Kind: platform.Pending, Host: "host-a", Reason: "ContainerCreating"},
		{NodeID: oom.ID, Kind: platform.Running, Host: "host-a"},
		{NodeID: oom.ID, Kind: platform.Exited, Host: "host-a", ExitCode: 137, Signal: 9, Reason: "OOMKilled"},
	}
	if diff := cmp.Diff(want, r.Of(oom.ID)); diff != "" {
		t.Errorf("events of the OOM-killed node (-want +got):\n%s", diff)
	}

	// Evicted: the kubelet kills the container and says why on the pod.
	evicted := nodeSpec("job", 1, 0)
	if err := p.Create(ctx, evicted); err != nil {
		t.Fatal(err)
	}
	c.bind(t, ns, evicted.ID, "host-b")
	c.setStatus(t, ns, evicted.ID, func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		s.ContainerStatuses = mainStatus(terminated(137, "Error"))
	})
	e := r.WaitKind(t, evicted.ID, platform.Exited)
	if e.ExitCode != 137 || e.Signal != 9 || e.Reason != "Evicted" || e.Host != "host-b" || !e.Failed() {
		t.Errorf("evicted node: %+v, want exit 137, signal 9, reason Evicted on host-b", e)
	}

	// Succeeded.
	done := nodeSpec("job", 2, 0)
	if err := p.Create(ctx, done); err != nil {
		t.Fatal(err)
	}
	c.bind(t, ns, done.ID, "host-c")
	c.setStatus(t, ns, done.ID, func(s *corev1.PodStatus) {
		s.Phase, s.ContainerStatuses = corev1.PodSucceeded, mainStatus(terminated(0, "Completed"))
	})
	e = r.WaitKind(t, done.ID, platform.Exited)
	if e.ExitCode != 0 || e.Signal != 0 || e.Failed() || e.Reason != "Completed" {
		t.Errorf("succeeded node: %+v, want exit 0", e)
	}

	// Delete: a running pod waits for its kubelet, which never comes here,
	// so Deleted is reported on the deletion timestamp; an unplaced or
	// ended pod is removed at once. Either way once: later changes of a
	// terminating pod report nothing.
	live, unplaced := nodeSpec("job", 3, 0), nodeSpec("job", 4, 0)
	for _, s := range []platform.NodeSpec{live, unplaced} {
		if err := p.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	c.bind(t, ns, live.ID, "host-d")
	c.setStatus(t, ns, live.ID, func(s *corev1.PodStatus) { s.Phase, s.ContainerStatuses = corev1.PodRunning, mainStatus(running) })
	r.WaitKind(t, live.ID, platform.Running)
	r.WaitKind(t, unplaced.ID, platform.Pending)
	for _, id := range []string{live.ID, unplaced.ID, oom.ID, live.ID, "job-worker-9-9"} {
		if err := p.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s): %v", id, err)
		}
	}
	if e := r.WaitKind(t, live.ID, platform.Deleted); e.Host != "host-d" {
		t.Errorf("deleted event %+v, want host-d", e)
	}
	r.WaitKind(t, unplaced.ID, platform.Deleted)
	r.WaitKind(t, oom.ID, platform.Deleted)
	if pod, err := c.cs.CoreV1().Pods(ns).Get(ctx, live.ID, metav1.GetOptions{}); err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("the running pod should stay terminating without a kubelet: %v", err)
	}
	c.setStatus(t, ns, live.ID, func(s *corev1.PodStatus) {
		s.Phase, s.ContainerStatuses = corev1.PodFailed, mainStatus(terminated(143, "Error"))
	})

	// Pods that are not nodes of this job are ignored: another job's, and
	// the master's.
	for _, pod := range []*corev1.Pod{
		foreignPod(ns, "other-worker-0-0", elasticv1.NodeLabels("other", elasticv1.Worker, 0, 0, 0)),
		foreignPod(ns, "job-master", elasticv1.NodeLabels("job", elasticv1.DLRoverMaster, 0, 0, 0)),
		foreignPod(ns, "job-unlabelled", elasticv1.JobLabels("job")),
	} {
		if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(ctx, pod.Name); err != nil {
			t.Errorf("Delete(%s) of a pod not ours: %v", pod.Name, err)
		}
		if _, err := c.cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("Delete removed %s, which is not a node of this job: %v", pod.Name, err)
		}
	}
	// A last node marks the end: events are delivered in order, so
	// anything the changes above made would have come before it.
	marker := nodeSpec("job", 5, 0)
	if err := p.Create(ctx, marker); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, marker.ID, platform.Pending)
	for _, id := range []string{"other-worker-0-0", "job-master", "job-unlabelled"} {
		if got := r.Of(id); len(got) > 0 {
			t.Errorf("events of %s, which is not a node of this job: %v", id, got)
		}
	}
	for id, n := range map[string]int{oom.ID: len(want) + 1, live.ID: 4, unplaced.ID: 2} {
		if got := r.Of(id); len(got) != n || got[n-1].Kind != platform.Deleted {
			t.Errorf("events of deleted node %s: %v, want %d ending with one Deleted", id, got, n)
		}
	}
}

func foreignPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "x"}}},
	}
}

// testReplay: a platform started after its pods exist (a restarted master)
// first reports each of them, sorted, then Synced.
func testReplay(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns = "replay"
	p, job := c.newJob(t, ns, "job")
	for rank := 2; rank >= 0; rank-- {
		if err := p.Create(ctx, nodeSpec("job", rank, 1)); err != nil {
			t.Fatal(err)
		}
	}
	c.bind(t, ns, "job-worker-1-1", "host-b")
	c.setStatus(t, ns, "job-worker-1-1", func(s *corev1.PodStatus) {
		s.Phase, s.ContainerStatuses = corev1.PodRunning, mainStatus(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	})
	c.setStatus(t, ns, "job-worker-2-1", func(s *corev1.PodStatus) {
		s.Phase, s.Reason = corev1.PodFailed, "Preempted"
	})
	if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, foreignPod(ns, "other-worker-0-0", elasticv1.NodeLabels("other", elasticv1.Worker, 0, 0, 0)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	restarted := c.platform(t, job) // a new master's
	r := watch(t, restarted)
	r.WaitFor(t, "Synced", func(e platform.Event) bool { return e.Kind == platform.Synced })
	want := []platform.Event{
		{NodeID: "job-worker-0-1", Kind: platform.Pending},
		{NodeID: "job-worker-1-1", Kind: platform.Running, Host: "host-b"},
		{NodeID: "job-worker-2-1", Kind: platform.Exited, ExitCode: -1, Reason: "Preempted"},
		{Kind: platform.Synced},
	}
	if diff := cmp.Diff(want, r.All()); diff != "" {
		t.Errorf("first report of a restarted master (-want +got):\n%s", diff)
	}
	// Then it follows.
	if err := restarted.Delete(ctx, "job-worker-0-1"); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, "job-worker-0-1", platform.Deleted)
}

// testForbidden: a master whose account may not list pods fails Watch with
// what to grant, instead of waiting forever.
func testForbidden(t *testing.T, c *cluster) {
	_, job := c.newJob(t, "forbidden", "job")
	_, cfg := c.env.AddUser(t, "no-rights")
	cs, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := JobOptions(job)
	opts.Client, opts.MasterAddr, opts.TokenSecret = cs, "m:29400", "job-token"
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.Watch(ctx, func(e platform.Event) { t.Errorf("event %+v without the right to list pods", e) })
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "grant") {
		t.Errorf("Watch without rights: %v, want Forbidden, saying what to grant", err)
	}
}
