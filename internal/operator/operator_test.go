package operator

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/kubenames"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestOperator runs one operator, as the user deploy/rbac allows, against a
// real API server, and drives a job per scenario through it, writing the
// master pods' status as a kubelet would.
func TestOperator(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	startOperator(t, env, Config{LeaderElect: true})
	t.Run("lease", func(t *testing.T) {
		eventually(t, "leader election lease", func() error {
			return c.Get(t.Context(), client.ObjectKey{Namespace: DefaultNamespace, Name: LeaderElectionID}, &coordinationv1.Lease{})
		})
	})

	t.Run("standby replica", func(t *testing.T) {
		// A second operator waits for the Lease, and its probes answer.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		startOperator(t, env, Config{LeaderElect: true, ProbeAddr: addr})
		for _, path := range []string{"/healthz", "/readyz"} {
			eventually(t, "GET "+path, func() error {
				resp, err := http.Get("http://" + addr + path)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %s", resp.Status)
				}
				return nil
			})
		}
	})

	t.Run("master role", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "master-role")
		master := k8stest.ApplyMasterRole(t, c, ns)
		for _, a := range []authorizationv1.ResourceAttributes{
			{Namespace: ns, Verb: "create", Resource: "pods"},
			{Namespace: ns, Verb: "watch", Resource: "pods"},
			{Namespace: ns, Verb: "delete", Resource: "pods"},
			{Namespace: ns, Verb: "get", Group: v1alpha1.Group, Resource: "elasticjobs"},
			{Namespace: ns, Verb: "patch", Group: v1alpha1.Group, Resource: "elasticjobs"},
			{Namespace: ns, Verb: "patch", Group: v1alpha1.Group, Resource: "elasticjobs", Subresource: "status"},
			{Namespace: ns, Verb: "list", Group: v1alpha1.Group, Resource: "scaleplans"},
		} {
			// The API server's RBAC authorizer learns of the new Role and
			// RoleBinding from its informers, a moment after they exist.
			k8stest.WaitFor(t, fmt.Sprintf("the master to be allowed to %s %s/%s", a.Verb, a.Resource, a.Subresource),
				func() bool { return canI(t, c, master, a) })
		}
		if canI(t, c, master, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets"}) {
			t.Error("the master may read Secrets")
		}
		if canI(t, c, master, authorizationv1.ResourceAttributes{Namespace: "elsewhere", Verb: "create", Resource: "pods"}) {
			t.Error("the master may create pods in another namespace")
		}
	})

	t.Run("operator deployment", func(t *testing.T) {
		t.Parallel()
		for _, obj := range k8stest.ReadYAML(t, filepath.Join(k8stest.RepoRoot(t), "deploy/operator/operator.yaml")) {
			if obj.GetKind() == "Namespace" { // made by startEnv
				continue
			}
			mustCreate(t, c, obj)
		}
	})

	t.Run("creates the master", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "create")
		job := newJob(ns, "train")
		mustCreate(t, c, job)
		pod := waitPod(t, c, ns, "train-rover-master-0")
		checkMasterPod(t, job, pod)

		svc := &corev1.Service{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "train-rover-master"}, svc); err != nil {
			t.Fatal(err)
		}
		checkOwner(t, job, svc)
		if d := cmp.Diff(MasterLabels("train"), svc.Spec.Selector); d != "" {
			t.Errorf("service selector (-want +got):\n%s", d)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 29400 || svc.Spec.Ports[0].Name != "rover" || svc.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("service spec %+v: want ClusterIP, one port 29400 named rover", svc.Spec)
		}
		secret := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "train-rover-token"}, secret); err != nil {
			t.Fatal(err)
		}
		checkOwner(t, job, secret)
		if tok, err := hex.DecodeString(string(secret.Data[kubenames.TokenKey])); err != nil || len(tok) != 32 {
			t.Errorf("token %q: want 32 bytes in hex", secret.Data[kubenames.TokenKey])
		}

		job = waitJob(t, c, ns, "train", "phase Pending", phaseIs(v1alpha1.PhasePending, CondCreated, ReasonMasterCreated))
		if job.Status.Selector != "app=dlrover,elasticjob.dlrover/name=train,elasticjob.dlrover/replica-type=worker" {
			t.Errorf("status.selector = %q", job.Status.Selector)
		}
		if job.Status.ObservedGeneration != job.Generation {
			t.Errorf("observedGeneration %d, want %d", job.Status.ObservedGeneration, job.Generation)
		}
		waitEvent(t, c, job, ReasonMasterCreated)

		// The master's own status fields, patched as the master patches
		// them, survive the operator's writes.
		base := job.DeepCopy()
		job.Status.RelaunchCount, job.Status.RestartCount = 5, 2
		job.Status.ReplicaStatuses = map[v1alpha1.ReplicaType]*v1alpha1.ReplicaStatus{v1alpha1.Worker: {Active: 2}}
		if err := c.Status().Patch(t.Context(), job, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		setPodStatus(t, c, pod, corev1.PodRunning, running(), "")
		job = waitJob(t, c, ns, "train", "phase Running", phaseIs(v1alpha1.PhaseRunning, CondRunning, ReasonMasterRunning))
		if job.Status.StartTime == nil {
			t.Error("no startTime once the master runs")
		}
		if s := job.Status; s.RelaunchCount != 5 || s.RestartCount != 2 || s.ReplicaStatuses[v1alpha1.Worker] == nil || s.ReplicaStatuses[v1alpha1.Worker].Active != 2 {
			t.Errorf("the master's status fields were overwritten: %+v", s)
		}
	})

	t.Run("relaunches a failed master", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "relaunch")
		mustCreate(t, c, newJob(ns, "train"))
		pod := waitPod(t, c, ns, "train-rover-master-0")
		secret := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "train-rover-token"}, secret); err != nil {
			t.Fatal(err)
		}
		setPodStatus(t, c, pod, corev1.PodFailed, exited(137, ""), "")
		waitPod(t, c, ns, "train-rover-master-1")
		job := waitJob(t, c, ns, "train", "masterRelaunches 1", func(j *v1alpha1.ElasticJob) error {
			if j.Status.MasterRelaunches != 1 {
				return fmt.Errorf("masterRelaunches %d", j.Status.MasterRelaunches)
			}
			return phaseIs(v1alpha1.PhasePending, "", "")(j)
		})
		if note := waitEvent(t, c, job, ReasonMasterRelaunched); !strings.Contains(note, "exited 137") {
			t.Errorf("event note %q does not say the master exited 137", note)
		}
		again := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(secret), again); err != nil {
			t.Fatal(err)
		}
		if string(again.Data[kubenames.TokenKey]) != string(secret.Data[kubenames.TokenKey]) {
			t.Error("the token changed on the master's relaunch")
		}
	})

	t.Run("relaunches a deleted master", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "deleted")
		mustCreate(t, c, newJob(ns, "train"))
		pod := waitPod(t, c, ns, "train-rover-master-0")
		setPodStatus(t, c, pod, corev1.PodRunning, running(), "")
		waitJob(t, c, ns, "train", "phase Running", phaseIs(v1alpha1.PhaseRunning, "", ""))
		if err := c.Delete(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		waitPod(t, c, ns, "train-rover-master-1")
		waitJob(t, c, ns, "train", "masterRelaunches 1", func(j *v1alpha1.ElasticJob) error {
			if j.Status.MasterRelaunches != 1 {
				return fmt.Errorf("masterRelaunches %d", j.Status.MasterRelaunches)
			}
			return nil
		})
	})

	t.Run("fails when the master budget is spent", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "budget")
		job := newJob(ns, "train")
		job.Annotations = map[string]string{AnnotationMasterRestartCount: "1"}
		mustCreate(t, c, job)
		worker := newWorker(ns, "train-worker-0", job)
		mustCreate(t, c, worker)
		setPodStatus(t, c, waitPod(t, c, ns, "train-rover-master-0"), corev1.PodFailed, corev1.ContainerState{}, "Evicted")
		setPodStatus(t, c, waitPod(t, c, ns, "train-rover-master-1"), corev1.PodFailed, exited(139, ""), "")
		job = waitJob(t, c, ns, "train", "phase Failed", phaseIs(v1alpha1.PhaseFailed, CondFailed, ReasonMasterBudgetExhausted))
		if job.Status.CompletionTime == nil || job.Status.MasterRelaunches != 1 {
			t.Errorf("status %+v: want a completionTime and masterRelaunches 1", job.Status)
		}
		waitEvent(t, c, job, ReasonMasterBudgetExhausted)
		waitGone(t, c, ns, worker.Name)
		for _, name := range []string{"train-rover-master-0", "train-rover-master-1"} {
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{}); err != nil {
				t.Errorf("failed master %s, kept for its logs: %v", name, err)
			}
		}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "train-rover-master-2"}, &corev1.Pod{}); err == nil {
			t.Error("a third master was created past the budget of 1 relaunch")
		}
	})

	t.Run("master exit 0 is success", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "success")
		mustCreate(t, c, newJob(ns, "train"))
		setPodStatus(t, c, waitPod(t, c, ns, "train-rover-master-0"), corev1.PodSucceeded, exited(0, ""), "")
		job := waitJob(t, c, ns, "train", "phase Succeeded", phaseIs(v1alpha1.PhaseSucceeded, CondSucceeded, ReasonJobSucceeded))
		if job.Status.CompletionTime == nil {
			t.Error("no completionTime")
		}
	})

	t.Run("master exit 1 fails the job", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "failure")
		mustCreate(t, c, newJob(ns, "train"))
		setPodStatus(t, c, waitPod(t, c, ns, "train-rover-master-0"), corev1.PodFailed, exited(1, "rank 3 failed: exit 1 (user error)\n"), "")
		job := waitJob(t, c, ns, "train", "phase Failed", phaseIs(v1alpha1.PhaseFailed, CondFailed, ReasonJobFailed))
		if got := meta.FindStatusCondition(job.Status.Conditions, CondFailed).Message; got != "rank 3 failed: exit 1 (user error)" {
			t.Errorf("Failed condition message %q, want the master's termination message", got)
		}
		if job.Status.MasterRelaunches != 0 {
			t.Errorf("masterRelaunches %d: a master that failed the job was relaunched", job.Status.MasterRelaunches)
		}
	})

	t.Run("suspend and resume", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "suspend")
		job := newJob(ns, "train")
		mustCreate(t, c, job)
		waitPod(t, c, ns, "train-rover-master-0")
		workers := []*corev1.Pod{newWorker(ns, "train-worker-0", job), newWorker(ns, "train-worker-1", job)}
		other := newWorker(ns, "other-worker-0", nil)
		for _, p := range append(workers, other) {
			mustCreate(t, c, p)
		}
		setSuspend(t, c, ns, "train", true)
		for _, p := range append(workers, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-rover-master-0"}}) {
			waitGone(t, c, ns, p.Name)
		}
		job = waitJob(t, c, ns, "train", "phase Suspended", phaseIs(v1alpha1.PhaseSuspended, CondSuspended, ReasonSuspended))
		waitEvent(t, c, job, ReasonSuspended)
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(other), &corev1.Pod{}); err != nil {
			t.Errorf("another job's pod: %v", err)
		}

		setSuspend(t, c, ns, "train", false)
		waitPod(t, c, ns, "train-rover-master-0")
		job = waitJob(t, c, ns, "train", "phase Pending", phaseIs(v1alpha1.PhasePending, "", ""))
		if cond := meta.FindStatusCondition(job.Status.Conditions, CondSuspended); cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonResumed {
			t.Errorf("Suspended condition %+v, want False/%s", cond, ReasonResumed)
		}
		waitEvent(t, c, job, ReasonResumed)
		if job.Status.MasterRelaunches != 0 {
			t.Errorf("masterRelaunches %d: a suspension counted as a relaunch", job.Status.MasterRelaunches)
		}
	})

	t.Run("created suspended", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "gated")
		job := newJob(ns, "train")
		job.Spec.Suspend = true
		mustCreate(t, c, job)
		waitJob(t, c, ns, "train", "phase Suspended", phaseIs(v1alpha1.PhaseSuspended, CondSuspended, ReasonSuspended))
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "train-rover-master-0"}, &corev1.Pod{}); err == nil {
			t.Error("a master was created for a suspended job")
		}
		setSuspend(t, c, ns, "train", false)
		waitPod(t, c, ns, "train-rover-master-0")
	})

	t.Run("invalid spec", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t, c, "invalid")
		job := newJob(ns, "train")
		job.Spec.ReplicaSpecs[v1alpha1.Worker].Replicas = new(int32(3)) // --nnodes=2
		mustCreate(t, c, job)
		job = waitJob(t, c, ns, "train", "phase Failed", phaseIs(v1alpha1.PhaseFailed, CondFailed, ReasonInvalidSpec))
		msg := meta.FindStatusCondition(job.Status.Conditions, CondFailed).Message
		if !strings.Contains(msg, "replicas") || !strings.Contains(msg, "nnodes") {
			t.Errorf("message %q does not name replicas and --nnodes", msg)
		}
		waitEvent(t, c, job, ReasonInvalidSpec)
		var pods corev1.PodList
		if err := c.List(t.Context(), &pods, client.InNamespace(ns)); err != nil || len(pods.Items) > 0 {
			t.Errorf("pods of an invalid job: %d (%v)", len(pods.Items), err)
		}
	})
}

// canI reports whether user may do a, by the API server's RBAC.
func canI(t *testing.T, c client.Client, user string, a authorizationv1.ResourceAttributes) bool {
	t.Helper()
	r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &a}}
	if err := c.Create(t.Context(), r); err != nil {
		t.Fatalf("access review: %v", err)
	}
	return r.Status.Allowed
}

// checkMasterPod checks the master pod the operator made for job.
func checkMasterPod(t *testing.T, job *v1alpha1.ElasticJob, pod *corev1.Pod) {
	t.Helper()
	checkOwner(t, job, pod)
	want := map[string]string{
		"app": "dlrover", "elasticjob.dlrover/name": job.Name,
		"elasticjob.dlrover/replica-type": "dlrover-master", "elasticjob.dlrover/relaunch-count": "0",
	}
	if d := cmp.Diff(want, pod.Labels); d != "" {
		t.Errorf("master pod labels (-want +got):\n%s", d)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ServiceAccountName != DefaultMasterServiceAccount {
		t.Errorf("restartPolicy %q, serviceAccountName %q", pod.Spec.RestartPolicy, pod.Spec.ServiceAccountName)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("master pod has %d containers, want 1", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]
	wantCmd := []string{"rover", "master", "--platform", "kubernetes", "--namespace", job.Namespace, "--job", job.Name,
		"--listen", "0.0.0.0:29400", "--token-file", "/var/run/rover/token", "--metrics-addr", "0.0.0.0:9400"}
	if ctr.Name != "master" || ctr.Image != testImage || !cmp.Equal(ctr.Command, wantCmd) {
		t.Errorf("container %s, image %s, command %q; want master, %s, %q", ctr.Name, ctr.Image, ctr.Command, testImage, wantCmd)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if d := cmp.Diff(map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}, env); d != "" {
		t.Errorf("env from fields (-want +got):\n%s", d)
	}
	if len(ctr.VolumeMounts) != 1 || ctr.VolumeMounts[0].MountPath != "/var/run/rover" || !ctr.VolumeMounts[0].ReadOnly {
		t.Errorf("volume mounts %+v: want the token read-only at /var/run/rover", ctr.VolumeMounts)
	}
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].Secret == nil {
		t.Fatalf("volumes %+v: want the token Secret", pod.Spec.Volumes)
	}
	sv := pod.Spec.Volumes[0].Secret
	if sv.SecretName != job.Name+"-rover-token" || sv.DefaultMode == nil || *sv.DefaultMode != 0o400 ||
		len(sv.Items) != 1 || sv.Items[0].Key != "token" || sv.Items[0].Path != "token" {
		t.Errorf("token volume %+v: want secret %s-rover-token, key token at token, mode 0400", sv, job.Name)
	}
}

// checkOwner checks that job controls obj.
func checkOwner(t *testing.T, job *v1alpha1.ElasticJob, obj client.Object) {
	t.Helper()
	if job.UID == "" {
		t.Fatal("the job has no UID: read it back after creating it")
	}
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID != job.UID || ref.Kind != v1alpha1.ElasticJobKind || ref.APIVersion != v1alpha1.GroupVersion.String() {
		t.Errorf("%T %s: controller %+v, want ElasticJob %s (uid %s)", obj, obj.GetName(), ref, job.Name, job.UID)
	}
}

// newWorker returns a worker pod of job as its master would make it (no
// owner when job is nil: another job's).
func newWorker(ns, name string, job *v1alpha1.ElasticJob) *corev1.Pod {
	jobName := strings.SplitN(name, "-worker-", 2)[0]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: v1alpha1.NodeLabels(jobName, v1alpha1.Worker, 0, 0, 0)},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "registry.example/train:1"}},
		},
	}
	if job != nil {
		pod.OwnerReferences = owner(job)
	}
	return pod
}

// setSuspend sets the job's spec.suspend.
func setSuspend(t *testing.T, c client.Client, ns, name string, suspend bool) {
	t.Helper()
	eventually(t, fmt.Sprintf("set spec.suspend %v", suspend), func() error {
		job, err := getJob(t, c, ns, name)
		if err != nil {
			return err
		}
		job.Spec.Suspend = suspend
		return c.Update(t.Context(), job)
	})
}
