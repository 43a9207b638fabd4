package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// controller-runtime's global logger, for what logs outside a manager;
	// each test's manager logs to the test.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}

// testImage is the master image the tests' operators use.
const testImage = "registry.example/rover:test"

// testWriter writes to t.Log until closed: the manager's last goroutines
// may log after the test ended, when t.Log would panic.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// operatorUser is the user the tests' operators run as, with no more rights
// than deploy/rbac grants the operator's service account.
const operatorUser = "rover-operator"

// startEnv starts an API server with Rover's CRDs and the operator's RBAC
// (deploy/rbac/role.yaml) bound to operatorUser.
func startEnv(t *testing.T) *k8stest.Env {
	t.Helper()
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: s})
	ctx := t.Context()
	c := env.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DefaultNamespace}})
	for _, obj := range k8stest.ReadYAML(t, filepath.Join(k8stest.RepoRoot(t), "deploy/rbac/role.yaml")) {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %s %s from deploy/rbac/role.yaml: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	user := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}}
	mustCreate(t, c, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rover-operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rover-operator"},
		Subjects:   user,
	})
	mustCreate(t, c, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rover-operator", Namespace: DefaultNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "rover-operator"},
		Subjects:   user,
	})
	return env
}

// startOperator runs an operator as operatorUser until the test ends.
func startOperator(t *testing.T, env *k8stest.Env, c Config) {
	t.Helper()
	w := &testWriter{t: t}
	c.Master.Image = testImage
	c.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if c.ProbeAddr == "" {
		c.ProbeAddr = "0"
	}
	c.skipNameValidation = true
	c.Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	_, cfg := env.AddUser(t, operatorUser)
	mgr, err := NewManager(cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
		w.close()
	})
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(t.Context(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// eventually calls check until it returns nil, and fails the test with its
// last error when k8stest.WaitTimeout passes first.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	k8stest.WaitNoError(t, what, check)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// newJob returns a valid job: 2 workers running rover run --nnodes=2.
func newJob(ns, name string) *v1alpha1.ElasticJob {
	return &v1alpha1.ElasticJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.ElasticJobSpec{
			ReplicaSpecs: map[v1alpha1.ReplicaType]*v1alpha1.ReplicaSpec{
				v1alpha1.Worker: {
					Replicas: new(int32(2)),
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{
							Name:    "main",
							Image:   "registry.example/train:1",
							Command: []string{"rover", "run", "--nnodes=2", "--nproc-per-node=2", "train.py"},
						}},
					}},
				},
			},
		},
	}
}

// getJob reads job name in ns.
func getJob(t *testing.T, c client.Client, ns, name string) (*v1alpha1.ElasticJob, error) {
	t.Helper()
	job := &v1alpha1.ElasticJob{}
	err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, job)
	return job, err
}

// waitJob waits until the job satisfies check, and returns it.
func waitJob(t *testing.T, c client.Client, ns, name, what string, check func(*v1alpha1.ElasticJob) error) *v1alpha1.ElasticJob {
	t.Helper()
	var job *v1alpha1.ElasticJob
	eventually(t, what, func() (err error) {
		if job, err = getJob(t, c, ns, name); err != nil {
			return err
		}
		return check(job)
	})
	return job
}

// phaseIs checks the job's phase and, when reason is given, the reason of
// the condition of the phase's type.
func phaseIs(p v1alpha1.JobPhase, cond, reason string) func(*v1alpha1.ElasticJob) error {
	return func(job *v1alpha1.ElasticJob) error {
		if job.Status.Phase != p {
			return fmt.Errorf("phase %q, want %q (conditions %+v)", job.Status.Phase, p, job.Status.Conditions)
		}
		if cond == "" {
			return nil
		}
		for _, c := range job.Status.Conditions {
			if c.Type == cond {
				if c.Status != metav1.ConditionTrue || c.Reason != reason {
					return fmt.Errorf("condition %s is %s/%s, want True/%s", cond, c.Status, c.Reason, reason)
				}
				return nil
			}
		}
		return fmt.Errorf("no condition %s in %+v", cond, job.Status.Conditions)
	}
}

// waitPod waits for pod name in ns to exist, and returns it.
func waitPod(t *testing.T, c client.Client, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	eventually(t, "pod "+name, func() error {
		return c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, pod)
	})
	return pod
}

// waitGone waits for pod name in ns not to exist.
func waitGone(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	eventually(t, "pod "+name+" deleted", func() error {
		err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{})
		if err == nil {
			return errors.New("it still exists")
		}
		return client.IgnoreNotFound(err)
	})
}

// setPodStatus writes a pod's phase and its master container's state, as a
// kubelet would.
func setPodStatus(t *testing.T, c client.Client, pod *corev1.Pod, phase corev1.PodPhase, state corev1.ContainerState, reason string) {
	t.Helper()
	eventually(t, "write the status of pod "+pod.Name, func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.Phase = phase
		pod.Status.Reason = reason
		pod.Status.ContainerStatuses = nil
		if state != (corev1.ContainerState{}) {
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: MasterContainer, Image: testImage, State: state, Ready: state.Running != nil,
			}}
		}
		return c.Status().Update(t.Context(), pod)
	})
}

// exited is a terminated container state with code and message.
func exited(code int32, message string) corev1.ContainerState {
	now := metav1.Now()
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Message: message, StartedAt: now, FinishedAt: now,
	}}
}

// running is a running container state.
func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
}

// waitEvent waits for an Event of reason about job and returns its note.
func waitEvent(t *testing.T, c client.Client, job *v1alpha1.ElasticJob, reason string) string {
	t.Helper()
	var note string
	eventually(t, "event "+reason+" about "+job.Name, func() error {
		var list eventsv1.EventList
		if err := c.List(t.Context(), &list, client.InNamespace(job.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == job.Name && e.Regarding.Kind == v1alpha1.ElasticJobKind && e.Reason == reason {
				note = e.Note
				return nil
			}
			seen = append(seen, e.Reason)
		}
		return fmt.Errorf("events seen: %v", seen)
	})
	return note
}
