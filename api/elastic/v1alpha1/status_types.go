package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// JobPhase is where an ElasticJob is in its life, as in DLRover.
type JobPhase string

// Phases. A job starts Created, is Pending while its nodes are placed,
// Running once training runs, and ends Succeeded or Failed; Suspended while
// spec.suspend is true.
const (
	PhaseCreated   JobPhase = "Created"
	PhasePending   JobPhase = "Pending"
	PhaseRunning   JobPhase = "Running"
	PhaseSucceeded JobPhase = "Succeeded"
	PhaseFailed    JobPhase = "Failed"
	PhaseSuspended JobPhase = "Suspended"
)

// Finished reports whether p is a final phase: Succeeded or Failed.
func (p JobPhase) Finished() bool {
	return p == PhaseSucceeded || p == PhaseFailed
}

// ElasticJobStatus is the observed state of an ElasticJob, written by the
// operator and the job's master.
type ElasticJobStatus struct {
	// Phase is where the job is in its life.
	//
	// +kubebuilder:validation:Enum=Created;Pending;Running;Succeeded;Failed;Suspended
	// +optional
	Phase JobPhase `json:"phase,omitempty"`

	// Conditions are the job's conditions (Created, Running, Succeeded,
	// Failed, Suspended), one per type.
	//
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ReplicaStatuses counts each group's nodes by state.
	//
	// +optional
	ReplicaStatuses map[ReplicaType]*ReplicaStatus `json:"replicaStatuses,omitempty"`

	// StartTime is when the master started the job.
	//
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the job succeeded or failed.
	//
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// RestartCount is how many times the worker group restarted in place.
	//
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`

	// RelaunchCount is how many nodes were relaunched (new pods with the
	// same rank).
	//
	// +optional
	RelaunchCount int32 `json:"relaunchCount,omitempty"`

	// LastFailure is the most recent failure and what was done about it.
	//
	// +optional
	LastFailure *Failure `json:"lastFailure,omitempty"`

	// MasterRelaunches is how many times the operator relaunched the
	// job's master.
	//
	// +optional
	MasterRelaunches int32 `json:"masterRelaunches,omitempty"`

	// Selector selects the worker pods, in the string form of a label
	// selector: the scale subresource's label selector.
	//
	// +optional
	Selector string `json:"selector,omitempty"`

	// ObservedGeneration is the spec's generation this status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ReplicaStatus counts one group's nodes by state, as in DLRover.
type ReplicaStatus struct {
	// Initial is the node count the group started with.
	Initial int32 `json:"initial,omitempty"`
	// Pending nodes wait to be placed or started.
	Pending int32 `json:"pending,omitempty"`
	// Active nodes run.
	Active int32 `json:"active,omitempty"`
	// Succeeded nodes finished their work.
	Succeeded int32 `json:"succeeded,omitempty"`
	// Failed nodes failed (relaunched or not).
	Failed int32 `json:"failed,omitempty"`
}

// Failure is one failure of a job's node and the action taken.
type Failure struct {
	// Cause is why it failed: user-error, out-of-memory, hardware, killed,
	// preempted, crash, peer-failure or unknown.
	Cause string `json:"cause,omitempty"`
	// Action is what was done: restart-in-place, relaunch-node,
	// relaunch-with-more-memory or fail-fast.
	Action string `json:"action,omitempty"`
	// Message says what happened, e.g. the exit status and the error.
	//
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// Node is the failed node's rank.
	Node int32 `json:"node"`
	// Time is when the failure was seen.
	Time metav1.Time `json:"time,omitempty"`
}
