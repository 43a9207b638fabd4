package v1alpha1

// Default sets the defaults that the CRD's schema gives (the API server
// applies them to every object it stores): for objects built in Go rather
// than read from the server. Fields already set are kept.
func (j *ElasticJob) Default() {
	j.Spec.Default()
}

// Default sets the spec's defaults: distributionStrategy AllreduceStrategy,
// optimizeMode single-job, and each group's restartCount 3.
func (s *ElasticJobSpec) Default() {
	if s.DistributionStrategy == "" {
		s.DistributionStrategy = AllreduceStrategy
	}
	if s.OptimizeMode == "" {
		s.OptimizeMode = SingleJob
	}
	for _, r := range s.ReplicaSpecs {
		if r != nil && r.RestartCount == nil {
			n := int32(DefaultRestartCount)
			r.RestartCount = &n
		}
	}
}
