package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScalePlan asks for a change in an ElasticJob's nodes: counts and
// resources per replica type, pods to create, remove or migrate. It has
// DLRover's shape. A plan a user writes is labelled
// elasticjob.dlrover/name=<job> and scale-type=manual (see [ManualScaleLabels]).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName={sp},categories={rover}
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.spec.ownerJob`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ScalePlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   ScalePlanSpec   `json:"spec"`
	Status ScalePlanStatus `json:"status,omitempty"`
}

// ScalePlanList is a list of ScalePlans.
//
// +kubebuilder:object:root=true
type ScalePlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ScalePlan `json:"items"`
}

// ScalePlanSpec is the change a ScalePlan asks for (DLRover's ScaleSpec).
type ScalePlanSpec struct {
	// OwnerJob is the name of the ElasticJob to scale, in the plan's
	// namespace.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	OwnerJob string `json:"ownerJob"`

	// ReplicaResourceSpecs are the wanted node counts and per-node
	// resources by replica type.
	//
	// +optional
	ReplicaResourceSpecs map[ReplicaType]ReplicaResourceSpec `json:"replicaResourceSpecs,omitempty"`

	// CreatePods are pods to create.
	//
	// +optional
	CreatePods []PodMeta `json:"createPods,omitempty"`

	// RemovePods are pods to remove.
	//
	// +optional
	RemovePods []PodMeta `json:"removePods,omitempty"`

	// MigratePods are pods to replace by pods with new resources.
	//
	// +optional
	MigratePods []PodMeta `json:"migratePods,omitempty"`

	// PsHosts are the parameter-server hosts (DLRover's parameter-server
	// jobs; Rover does not run them).
	//
	// +optional
	PsHosts []string `json:"psHosts,omitempty"`
}

// ReplicaResourceSpec is a wanted node count and per-node resources.
type ReplicaResourceSpec struct {
	// Replicas is the wanted node count.
	//
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Resource is each node's resources (cpu, memory, ...).
	//
	// +optional
	Resource corev1.ResourceList `json:"resource,omitempty"`
}

// PodMeta names one pod of a plan.
type PodMeta struct {
	// Name is the pod's name.
	Name string `json:"name,omitempty"`
	// ID is the node id.
	ID int32 `json:"id,omitempty"`
	// Type is the node's replica type.
	Type ReplicaType `json:"type,omitempty"`
	// RankIndex is the node's rank.
	RankIndex int32 `json:"rankIndex,omitempty"`
	// Service is the service whose endpoint is the pod.
	Service string `json:"service,omitempty"`
	// Resource is the pod's resources.
	Resource corev1.ResourceList `json:"resource,omitempty"`
}

// ScalePlanStatus is how far a ScalePlan got.
type ScalePlanStatus struct {
	// Phase is where the plan is: Created, Pending, Running, Succeeded or
	// Failed (DLRover's job phases).
	//
	// +optional
	Phase JobPhase `json:"phase,omitempty"`

	// CreateTime is when the plan was acknowledged.
	//
	// +optional
	CreateTime *metav1.Time `json:"createTime,omitempty"`

	// FinishTime is when the plan was carried out or given up.
	//
	// +optional
	FinishTime *metav1.Time `json:"finishTime,omitempty"`

	// Message says why the plan failed, or what was done.
	//
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Message string `json:"message,omitempty"`
}
