package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubenames"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// The operator's permissions, generated into deploy/rbac/role.yaml by make
// manifests. elasticjobs/finalizers lets it set blockOwnerDeletion on the
// objects it owns where the OwnerReferencesPermissionEnforcement admission
// plugin runs. Secrets are read and created one by one, never listed.
//
// +kubebuilder:rbac:groups=elastic.rover.dev,resources=elasticjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=elastic.rover.dev,resources=elasticjobs/status,verbs=get;patch
// +kubebuilder:rbac:groups=elastic.rover.dev,resources=elasticjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=rover-system

// Reconciler reconciles ElasticJobs into their masters. Its Reconcile reads
// the job and its master pod, acts (create, relaunch, delete), and writes
// the job's status once.
type Reconciler struct {
	client client.Client
	// reader reads around the cache: Secrets (never cached) and a master
	// pod the cache does not have yet.
	reader client.Reader
	events events.EventRecorder
	clock  clock.PassiveClock
	log    *slog.Logger
	master MasterConfig
}

// errTerminating: a master pod of the name to create is still being
// deleted; the reconcile waits for it to go.
var errTerminating = errors.New("the previous master pod is still being deleted")

// retryTerminating is how soon a reconcile that waits for a pod to go runs
// again, in case its deletion event was missed.
const retryTerminating = 2 * time.Second

// SetupWithManager registers r with mgr: it runs on changes of ElasticJobs,
// of their master pods and of their Services.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts ...func(*builder.Builder) *builder.Builder) error {
	isMaster := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[v1alpha1.LabelReplicaType] == string(v1alpha1.DLRoverMaster)
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("elasticjob").
		For(&v1alpha1.ElasticJob{}).
		Owns(&corev1.Pod{}, builder.WithPredicates(isMaster)).
		Owns(&corev1.Service{})
	for _, o := range opts {
		b = o(b)
	}
	return b.Complete(r)
}

// Reconcile brings one job's master in line with the job and writes the
// job's status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job := &v1alpha1.ElasticJob{}
	if err := r.client.Get(ctx, req.NamespacedName, job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if job.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // its objects go with it
	}
	want := job.DeepCopy()
	res, err := r.sync(ctx, want)
	if errors.Is(err, errTerminating) {
		res, err = ctrl.Result{RequeueAfter: retryTerminating}, nil
	}
	if werr := r.writeStatus(ctx, job, want); werr != nil {
		err = errors.Join(err, werr)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reconcile ElasticJob %s: %w", req.NamespacedName, err)
	}
	return res, nil
}

// sync acts on job and edits its status in place.
func (r *Reconciler) sync(ctx context.Context, job *v1alpha1.ElasticJob) (ctrl.Result, error) {
	s := &job.Status
	w := statusWriter{s: s, now: metav1.NewTime(r.clock.Now()), generation: job.Generation}
	s.ObservedGeneration = job.Generation
	s.Selector = v1alpha1.WorkerSelector(job.Name)
	if s.Phase == "" {
		s.Phase = v1alpha1.PhaseCreated
	}
	switch {
	case s.Phase.Finished():
		return ctrl.Result{}, nil
	case job.Spec.Suspend:
		return ctrl.Result{}, r.suspend(ctx, job, w)
	case s.Phase == v1alpha1.PhaseCreated || s.Phase == v1alpha1.PhaseSuspended:
		return ctrl.Result{}, r.start(ctx, job, w)
	}
	if err := r.ensureService(ctx, job); err != nil {
		return ctrl.Result{}, err
	}
	pod, err := r.masterPod(ctx, job, s.MasterRelaunches)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs := observeMaster(pod)
	switch obs.state {
	case masterPending:
		w.pending(ReasonMasterPending, obs.message)
	case masterRunning:
		w.running(obs.message)
	case masterTerminating:
		return ctrl.Result{RequeueAfter: retryTerminating}, nil
	case masterSucceeded:
		w.succeeded(obs.message)
		r.log.Info("job succeeded", "job", job.Name, "namespace", job.Namespace)
	case masterJobFailed:
		w.failed(ReasonJobFailed, obs.message)
		r.log.Info("job failed", "job", job.Name, "namespace", job.Namespace, "reason", obs.message)
	case masterRefused:
		w.failed(ReasonMasterRefused, obs.message)
		r.event(job, corev1.EventTypeWarning, ReasonMasterRefused, "Fail", "%s", obs.message)
	case masterGone, masterLost:
		return ctrl.Result{}, r.relaunch(ctx, job, w, obs.message)
	}
	return ctrl.Result{}, nil
}

// start validates job and creates its first master, or its master again
// after a suspension.
func (r *Reconciler) start(ctx context.Context, job *v1alpha1.ElasticJob, w statusWriter) error {
	if _, err := validate(job); err != nil {
		msg := "the job cannot run: " + err.Error()
		w.failed(ReasonInvalidSpec, msg)
		r.event(job, corev1.EventTypeWarning, ReasonInvalidSpec, "Validate", "%s", msg)
		r.log.Info("job refused", "job", job.Name, "namespace", job.Namespace, "err", err)
		return nil
	}
	if err := r.ensureService(ctx, job); err != nil {
		return err
	}
	n := job.Status.MasterRelaunches
	created, err := r.createMaster(ctx, job, n)
	if err != nil {
		return err
	}
	name := kubenames.MasterPod(job.Name, n)
	if job.Status.Phase == v1alpha1.PhaseSuspended {
		w.resumed("spec.suspend is false: the master was started again")
		r.event(job, corev1.EventTypeNormal, ReasonResumed, "Resume", "spec.suspend is false: starting the master %s", name)
	}
	if created {
		r.event(job, corev1.EventTypeNormal, ReasonMasterCreated, "Create", "created the master pod %s", name)
		r.log.Info("master created", "job", job.Name, "namespace", job.Namespace, "pod", name)
	}
	w.set(CondCreated, metav1.ConditionTrue, ReasonMasterCreated, "created the master pod "+name)
	w.pending(ReasonMasterCreated, fmt.Sprintf("the master pod %s was created", name))
	return nil
}

// relaunch replaces the job's lost master (why says how it was lost) with
// the next one, or fails the job when the master's budget is spent.
func (r *Reconciler) relaunch(ctx context.Context, job *v1alpha1.ElasticJob, w statusWriter, why string) error {
	s := &job.Status
	budget, err := masterBudget(job)
	if err != nil {
		w.failed(ReasonInvalidSpec, fmt.Sprintf("%s, and it cannot be relaunched: %v", why, err))
		return nil
	}
	if s.MasterRelaunches >= budget {
		msg := fmt.Sprintf("%s; the master was relaunched %d times, its whole budget (annotation %s): the job fails",
			why, s.MasterRelaunches, AnnotationMasterRestartCount)
		w.failed(ReasonMasterBudgetExhausted, msg)
		r.event(job, corev1.EventTypeWarning, ReasonMasterBudgetExhausted, "Fail", "%s", msg)
		r.log.Info("master budget exhausted", "job", job.Name, "namespace", job.Namespace, "reason", why)
		// Workers without a master can only wait: stop them. The failed
		// masters stay, for their logs.
		_, err := r.deletePods(ctx, job, true)
		return err
	}
	next := s.MasterRelaunches + 1
	created, err := r.createMaster(ctx, job, next)
	if err != nil {
		return err
	}
	s.MasterRelaunches = next
	name := kubenames.MasterPod(job.Name, next)
	msg := fmt.Sprintf("%s; relaunched it as %s (relaunch %d of %d)", why, name, next, budget)
	if created {
		r.event(job, corev1.EventTypeWarning, ReasonMasterRelaunched, "Relaunch", "%s", msg)
		r.log.Info("master relaunched", "job", job.Name, "namespace", job.Namespace, "pod", name, "reason", why)
	}
	w.pending(ReasonMasterRelaunched, msg)
	return nil
}

// suspend deletes the job's pods, master and workers, and marks it
// Suspended. It runs on every reconcile while spec.suspend holds, so that a
// pod created meanwhile goes too.
func (r *Reconciler) suspend(ctx context.Context, job *v1alpha1.ElasticJob, w statusWriter) error {
	n, err := r.deletePods(ctx, job, false)
	if err != nil {
		return err
	}
	if job.Status.Phase != v1alpha1.PhaseSuspended {
		r.event(job, corev1.EventTypeNormal, ReasonSuspended, "Suspend", "spec.suspend is true: deleted the job's %d pods", n)
		r.log.Info("job suspended", "job", job.Name, "namespace", job.Namespace, "pods", n)
	}
	w.suspended("spec.suspend is true: the job's master and workers are stopped")
	return nil
}

// deletePods deletes every pod labelled with job's name (the master and
// the workers it made), but those that finished when keepFinished, and
// returns how many it deleted.
func (r *Reconciler) deletePods(ctx context.Context, job *v1alpha1.ElasticJob, keepFinished bool) (int, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels(v1alpha1.JobLabels(job.Name))); err != nil {
		return 0, fmt.Errorf("list the pods of job %s: %w", job.Name, err)
	}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		if p.DeletionTimestamp != nil || keepFinished && finished {
			continue
		}
		err := r.client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return n, fmt.Errorf("delete pod %s of job %s: %w", p.Name, job.Name, err)
		}
		n++
	}
	return n, nil
}

// masterPod returns the job's master pod after n relaunches, or nil when
// there is none. A pod missing from the cache is looked up on the server,
// as the cache may not have one just created.
func (r *Reconciler) masterPod(ctx context.Context, job *v1alpha1.ElasticJob, n int32) (*corev1.Pod, error) {
	key := client.ObjectKey{Namespace: job.Namespace, Name: kubenames.MasterPod(job.Name, n)}
	pod := &corev1.Pod{}
	err := r.client.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = r.reader.Get(ctx, key, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get master pod %s: %w", key.Name, err)
	}
	return pod, nil
}

// createMaster creates the job's token Secret when missing and its master
// pod after n relaunches. It reports false when that pod already existed
// (a status not yet written), and errTerminating when it is being deleted.
func (r *Reconciler) createMaster(ctx context.Context, job *v1alpha1.ElasticJob, n int32) (bool, error) {
	if err := r.ensureSecret(ctx, job); err != nil {
		return false, err
	}
	pod := masterPod(job, n, r.master)
	err := r.client.Create(ctx, pod)
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("create master pod %s: %w", pod.Name, err)
	}
	have := &corev1.Pod{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(pod), have); err != nil {
		return false, fmt.Errorf("get master pod %s: %w", pod.Name, err)
	}
	if have.DeletionTimestamp != nil {
		return false, errTerminating
	}
	return false, nil
}

// ensureSecret creates the job's token Secret when it does not exist. An
// existing one is kept as it is: the token is never rotated.
func (r *Reconciler) ensureSecret(ctx context.Context, job *v1alpha1.ElasticJob) error {
	want := tokenSecret(job)
	err := r.reader.Get(ctx, client.ObjectKeyFromObject(want), &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("get token secret %s: %w", want.Name, err)
		}
		return nil
	}
	if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create token secret %s: %w", want.Name, err)
	}
	return nil
}

// ensureService creates the job's master Service, or puts its selector and
// port back when they were changed.
func (r *Reconciler) ensureService(ctx context.Context, job *v1alpha1.ElasticJob) error {
	want := masterService(job)
	have := &corev1.Service{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create master service %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get master service %s: %w", want.Name, err)
	}
	if sameService(have, want) {
		return nil
	}
	patch := client.MergeFrom(have.DeepCopy())
	have.Spec.Selector, have.Spec.Ports = want.Spec.Selector, want.Spec.Ports
	if err := r.client.Patch(ctx, have, patch); err != nil {
		return fmt.Errorf("restore master service %s: %w", want.Name, err)
	}
	return nil
}

// writeStatus patches the status fields the operator changed from old to
// want, and no other: the master's fields stay as the master wrote them. A
// patch on a stale job is dropped; the newer job's event reconciles again.
func (r *Reconciler) writeStatus(ctx context.Context, old, want *v1alpha1.ElasticJob) error {
	if equality.Semantic.DeepEqual(old.Status, want.Status) {
		return nil
	}
	err := r.client.Status().Patch(ctx, want, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

// maxNote is the longest note an events.k8s.io/v1 Event may have.
const maxNote = 1024

// event records an Event about job, its note cut to what the API takes.
func (r *Reconciler) event(job *v1alpha1.ElasticJob, typ, reason, action, note string, args ...any) {
	note = fmt.Sprintf(note, args...)
	if len(note) > maxNote {
		note = strings.ToValidUTF8(note[:maxNote-len("...")], "") + "..."
	}
	r.events.Eventf(job, nil, typ, reason, action, "%s", note)
}
