package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of Rover's custom resources.
const Group = "elastic.rover.dev"

// DLRoverAPIVersion is the apiVersion of DLRover's ElasticJob, whose
// objects Rover's take unchanged but for the apiVersion.
const DLRoverAPIVersion = "elastic.iml.github.io/v1alpha1"

var (
	// GroupVersion is elastic.rover.dev/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds ElasticJob, ScalePlan and their lists to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kinds.
const (
	ElasticJobKind = "ElasticJob"
	ScalePlanKind  = "ScalePlan"
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ElasticJob{}, &ElasticJobList{},
		&ScalePlan{}, &ScalePlanList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
