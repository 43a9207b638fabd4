package operator

import (
	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of an ElasticJob that the operator writes.
const (
	// CondCreated is true once the job's master was created.
	CondCreated = "Created"
	// CondRunning is true while the job's master runs.
	CondRunning = "Running"
	// CondSuspended is true while spec.suspend is; false once resumed.
	CondSuspended = "Suspended"
	// CondSucceeded is true when the job succeeded.
	CondSucceeded = "Succeeded"
	// CondFailed is true when the job failed.
	CondFailed = "Failed"
)

// Reasons of the conditions and Events the operator writes.
const (
	ReasonMasterCreated         = "MasterCreated"
	ReasonMasterPending         = "MasterPending"
	ReasonMasterRunning         = "MasterRunning"
	ReasonMasterRelaunched      = "MasterRelaunched"
	ReasonMasterBudgetExhausted = "MasterBudgetExhausted"
	ReasonMasterRefused         = "MasterRefused"
	ReasonSuspended             = "Suspended"
	ReasonResumed               = "Resumed"
	ReasonJobSucceeded          = "JobSucceeded"
	ReasonJobFailed             = "JobFailed"
	ReasonInvalidSpec           = "InvalidSpec"
)

// statusWriter edits the operator's fields of a job's status, with the
// time of the reconcile and the spec generation it describes. It touches
// no field the master owns.
type statusWriter struct {
	s          *v1alpha1.ElasticJobStatus
	now        metav1.Time
	generation int64
}

// set sets the condition of type t, keeping its transition time when its
// status does not change.
func (w statusWriter) set(t string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&w.s.Conditions, metav1.Condition{
		Type:               t,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: w.generation,
		LastTransitionTime: w.now,
	})
}

// setIfPresent sets the condition of type t when the status has one.
func (w statusWriter) setIfPresent(t string, status metav1.ConditionStatus, reason, message string) {
	if meta.FindStatusCondition(w.s.Conditions, t) != nil {
		w.set(t, status, reason, message)
	}
}

// pending: the master waits to start, for why.
func (w statusWriter) pending(reason, why string) {
	w.s.Phase = v1alpha1.PhasePending
	w.set(CondRunning, metav1.ConditionFalse, reason, why)
}

// running: the master runs.
func (w statusWriter) running(why string) {
	w.s.Phase = v1alpha1.PhaseRunning
	if w.s.StartTime == nil {
		w.s.StartTime = new(w.now)
	}
	w.set(CondRunning, metav1.ConditionTrue, ReasonMasterRunning, why)
}

// succeeded: the job ended well.
func (w statusWriter) succeeded(why string) {
	w.finish(v1alpha1.PhaseSucceeded)
	w.set(CondSucceeded, metav1.ConditionTrue, ReasonJobSucceeded, why)
	w.setIfPresent(CondRunning, metav1.ConditionFalse, ReasonJobSucceeded, why)
}

// failed: the job failed, for reason.
func (w statusWriter) failed(reason, why string) {
	w.finish(v1alpha1.PhaseFailed)
	w.set(CondFailed, metav1.ConditionTrue, reason, why)
	w.setIfPresent(CondRunning, metav1.ConditionFalse, reason, why)
}

func (w statusWriter) finish(p v1alpha1.JobPhase) {
	w.s.Phase = p
	if w.s.CompletionTime == nil {
		w.s.CompletionTime = new(w.now)
	}
}

// suspended: spec.suspend holds the job.
func (w statusWriter) suspended(why string) {
	w.s.Phase = v1alpha1.PhaseSuspended
	w.set(CondSuspended, metav1.ConditionTrue, ReasonSuspended, why)
	w.setIfPresent(CondRunning, metav1.ConditionFalse, ReasonSuspended, why)
}

// resumed: spec.suspend was cleared.
func (w statusWriter) resumed(why string) {
	w.setIfPresent(CondSuspended, metav1.ConditionFalse, ReasonResumed, why)
}
