package kubemaster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/store"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// fullStore is a Memory store whose appends fail with ENOSPC once full is set.
type fullStore struct {
	*store.Memory
	full atomic.Bool
}

func (s *fullStore) Append(ctx context.Context, recs [][]byte) error {
	if s.full.Load() {
		return syscall.ENOSPC
	}
	return s.Memory.Append(ctx, recs)
}

// TestMasterPodStopsOnStoreFailure: the master of an ElasticJob whose store
// refuses a write returns the cause (ErrStoreFailed) at once, so that its
// pod exits non-zero, rather than wait for an outcome it cannot reach.
func TestMasterPodStopsOnStoreFailure(t *testing.T) {
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: Scheme()})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "full"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	job := ddpJob(t, ns)
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	st := &fullStore{Memory: store.NewMemory()}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: env.Config, Namespace: ns, Job: job.Name, Listen: "127.0.0.1:0", Token: "secret",
			Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StatusEvery: 50 * time.Millisecond})
	}()
	k8stest.WaitFor(t, "the two worker pods", func() bool {
		return slices.Equal(livePods(t, cs, ns, job.Name), []string{"ddp-worker-0-0", "ddp-worker-1-0"})
	})
	st.full.Store(true)
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "ddp-worker-1-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodFailed // a transition the master must journal
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, master.ErrStoreFailed) || !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("Run = %v, want the store's ENOSPC wrapped in master.ErrStoreFailed", err)
		}
	case <-time.After(2 * time.Minute): // only turns a hang into a failure
		t.Fatal("Run did not return after the store failed")
	}
}
