package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ElasticJob is an elastic, fault-tolerant training job: Rover's operator
// makes its master, and the master makes, watches and relaunches the worker
// pods. The spec is DLRover's ElasticJob spec with Rover's additions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicaSpecs.worker.replicas,statuspath=.status.replicaStatuses.worker.active,selectorpath=.status.selector
// +kubebuilder:resource:scope=Namespaced,shortName={ej,elasticjob},categories={all,rover}
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicaSpecs.worker.replicas`,description="Worker nodes wanted"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.replicaStatuses.worker.active`,description="Worker nodes running"
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restartCount`,description="Worker-group restarts in place"
// +kubebuilder:printcolumn:name="Relaunches",type=integer,JSONPath=`.status.relaunchCount`,description="Nodes relaunched"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ElasticJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   ElasticJobSpec   `json:"spec"`
	Status ElasticJobStatus `json:"status,omitempty"`
}

// ElasticJobList is a list of ElasticJobs.
//
// +kubebuilder:object:root=true
type ElasticJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ElasticJob `json:"items"`
}

// The values of the spec's enumerated fields that Rover runs.
const (
	// AllreduceStrategy is the only distribution strategy Rover runs.
	AllreduceStrategy = "AllreduceStrategy"
	// ParameterServerStrategy is DLRover's other strategy; refused.
	ParameterServerStrategy = "ParameterServerStrategy"
	// SingleJob is the only optimize mode Rover runs.
	SingleJob = "single-job"
)

// ElasticJobSpec is the desired state of an ElasticJob: DLRover's fields,
// and Rover's additions (marked "Rover"). Every field a DLRover user may
// write is accepted, or refused with a message naming it.
//
// +kubebuilder:validation:XValidation:rule="has(self.distributionStrategy) && self.distributionStrategy == 'ParameterServerStrategy' || self.replicaSpecs.all(k, k in ['worker', 'dlrover-master'])",message="replicaSpecs: ps, chief and evaluator run in ParameterServerStrategy jobs only: set distributionStrategy: ParameterServerStrategy, or remove them (an AllreduceStrategy job's worker rank 0 plays the chief)"
// +kubebuilder:validation:XValidation:rule="!has(self.distributionStrategy) || self.distributionStrategy != 'ParameterServerStrategy' || 'ps' in self.replicaSpecs",message="replicaSpecs.ps is missing: a ParameterServerStrategy job needs a ps group"
type ElasticJobSpec struct {
	// DistributionStrategy is how the job trains: AllreduceStrategy (the
	// default: PyTorch DDP, FSDP and the like) or ParameterServerStrategy
	// (ps, worker, chief and evaluator roles, each process with its
	// TF_CONFIG; docs/parameter-server.md).
	//
	// +kubebuilder:default=AllreduceStrategy
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self in ['AllreduceStrategy', 'ParameterServerStrategy']",message="distributionStrategy must be AllreduceStrategy or ParameterServerStrategy"
	// +optional
	DistributionStrategy string `json:"distributionStrategy,omitempty"`

	// OptimizeMode is who sizes the job: single-job (the default), the
	// job's own master. DLRover's cluster and manual modes are refused.
	//
	// +kubebuilder:default=single-job
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == 'single-job'",message="Rover optimizes each job on its own: use single-job or leave it out (cluster and manual are not supported)"
	// +optional
	OptimizeMode string `json:"optimizeMode,omitempty"`

	// BrainService is DLRover's address of its Brain optimizer, used with
	// optimizeMode cluster only. Refused when set.
	//
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self == ''",message="brainService is used with optimizeMode cluster only, which Rover does not support; remove it"
	// +optional
	BrainService string `json:"brainService,omitempty"`

	// ResourceLimits is the most the whole job may use, e.g. {cpu: "100",
	// memory: 1000Gi}. Write fractions as strings ("0.5" or 500m).
	//
	// +optional
	ResourceLimits map[corev1.ResourceName]resource.Quantity `json:"resourceLimits,omitempty"`

	// ReplicaSpecs are the job's node groups by replica type. worker is
	// required; an AllreduceStrategy job runs it only, a
	// ParameterServerStrategy job also ps (required), chief and
	// evaluator. dlrover-master is accepted and ignored (the operator
	// makes the master); a container of it that names an image or a
	// command is refused by the operator's admission.
	//
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=5
	// +kubebuilder:validation:XValidation:rule="'worker' in self",message="replicaSpecs.worker is missing: every job needs a worker group with the training container"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['worker', 'ps', 'chief', 'evaluator', 'dlrover-master'])",message="unknown replica type: use worker (and ps, chief, evaluator in a ParameterServerStrategy job)"
	// +kubebuilder:validation:XValidation:rule="!('worker' in self) || has(self.worker.template) && has(self.worker.template.spec) && size(self.worker.template.spec.containers) > 0",message="replicaSpecs.worker.template.spec.containers is empty: give the training container (named main, or the only one)"
	// +required
	ReplicaSpecs map[ReplicaType]*ReplicaSpec `json:"replicaSpecs"`

	// Envs is the job-wide environment, merged into every container's env
	// (the container wins): NAME: value, or DLRover's NAME: {name: NAME,
	// value: VALUE}. Values are checked by the operator, not the API
	// server: see docs/kubernetes.md.
	//
	// +optional
	Envs map[string]EnvValue `json:"envs,omitempty"`

	// Suspend creates the job without starting it; setting it on a running
	// job stops its pods (Kueue gates jobs with it).
	//
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// MaxRestarts (Rover) is how many times the worker group may restart
	// in place. Usually from --max-restarts in the command; both given
	// must agree. Default 0.
	//
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`

	// NodeUnit (Rover): nodes join and leave in groups of this size.
	// Usually from --node-unit; both given must agree. Default 1.
	//
	// +kubebuilder:validation:Minimum=1
	// +optional
	NodeUnit *int32 `json:"nodeUnit,omitempty"`

	// PendingTimeout (Rover) is how long nodes may wait to be placed before
	// the job fails: seconds (600) or a duration ("10m"). It wins over the
	// pending_timeout annotation.
	//
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^([0-9]+([.][0-9]*)?|[.][0-9]+)$|^(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+$')",message="pendingTimeout: give seconds (600) or a duration (10m), 0 or more"
	// +optional
	PendingTimeout *intstr.IntOrString `json:"pendingTimeout,omitempty"`
}

// ReplicaType names a node group: a key of spec.replicaSpecs.
type ReplicaType string

// The replica types of DLRover's ElasticJob. Rover runs Worker; PS, Chief
// and Evaluator are refused; DLRoverMaster is accepted without containers
// and ignored.
const (
	Worker        ReplicaType = "worker"
	PS            ReplicaType = "ps"
	Chief         ReplicaType = "chief"
	Evaluator     ReplicaType = "evaluator"
	DLRoverMaster ReplicaType = "dlrover-master"
)

// Relaunch budget per node, as in DLRover.
const (
	DefaultRestartCount = 3
	MaxRestartCount     = 5
)

// ReplicaSpec is one node group: DLRover's replica spec with Rover's
// additions (marked "Rover").
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas",fieldPath=".minReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.template) || !has(self.template.spec) || !has(self.template.spec.restartPolicy) || self.template.spec.restartPolicy in ['Never', 'Always', 'OnFailure']",message="template.spec.restartPolicy must be Never, Always or OnFailure (pods run with Never: Rover relaunches failed nodes itself, restartCount)",fieldPath=".template.spec.restartPolicy"
type ReplicaSpec struct {
	// Replicas is how many nodes the group runs: with a launcher in the
	// command, within its --nnodes MIN:MAX (default MAX). The scale
	// subresource (kubectl scale) and ScalePlans set the worker's while the
	// job runs; the master creates or removes nodes to match, and sets a
	// count outside --nnodes back, with a warning event.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Template is the pod of each node, honoured as written (volumes,
	// securityContext, sidecars, ...). The training container is the one
	// named main, or the only one. Pods run with restartPolicy Never
	// whatever the template says, as DLRover's do.
	//
	// +optional
	Template corev1.PodTemplateSpec `json:"template,omitempty"`

	// RestartPolicy is Kubeflow's replica restart policy, accepted as
	// DLRover accepts it; Rover relaunches failed nodes itself
	// (restartCount), so its pods run with Never.
	//
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self in ['Never', 'Always', 'OnFailure', 'ExitCode']",message="restartPolicy must be Never, Always, OnFailure or ExitCode (Rover relaunches failed nodes itself, restartCount)"
	// +optional
	RestartPolicy string `json:"restartPolicy,omitempty"`

	// RestartCount is how many times each node may be relaunched: default
	// 3, at most 5 (DLRover's cap).
	//
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	// +optional
	RestartCount *int32 `json:"restartCount,omitempty"`

	// AutoScale lets the master decide the node count.
	//
	// +optional
	AutoScale bool `json:"autoScale,omitempty"`

	// RestartTimeout is how long a relaunched node may take, in seconds.
	//
	// +kubebuilder:validation:Minimum=0
	// +optional
	RestartTimeout *int32 `json:"restartTimeout,omitempty"`

	// Priority is high, low, or a fraction such as "0.5" (the first half
	// of the node ids high). Quote fractions.
	//
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self in ['high', 'low'] || self.matches('^(0([.][0-9]*)?|1([.]0*)?|[.][0-9]+)$')",message="priority must be high, low, or a fraction between 0 and 1 such as \"0.5\""
	// +optional
	Priority string `json:"priority,omitempty"`

	// CriticalNodes lists the node ids whose failure fails the job, each
	// optionally with its own relaunch budget: "0:3,1", or one id.
	//
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9 ]+(:[0-9 ]+)?(,[0-9 ]*(:[0-9 ]+)?)*$')",message="criticalNodes must be node ids, each optionally with a relaunch budget, comma-separated: \"0:3,1\""
	// +optional
	CriticalNodes *intstr.IntOrString `json:"criticalNodes,omitempty"`

	// MinReplicas and MaxReplicas (Rover) bound an elastic group's node
	// count when the command is not a launcher; with a launcher they must
	// agree with --nnodes.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`

	// NprocPerNode (Rover) is the worker processes per node when the
	// command is not a launcher (default 1); with a launcher it must agree
	// with --nproc-per-node.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +optional
	NprocPerNode *int32 `json:"nprocPerNode,omitempty"`

	// BatchScheduler is DLRover's scheduler choice; Rover uses the
	// cluster's default scheduler, so only "default" (or nothing) is
	// accepted. Its JSON name is capitalised, as in DLRover.
	//
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == 'default'",message="BatchScheduler must be default or left out: Rover does not gang-schedule with volcano"
	// +optional
	BatchScheduler string `json:"BatchScheduler,omitempty"`
}
