// Package jobspec owns the declarative description of a training job: what
// "rover submit job.yaml" runs on a platform (processes on this machine now,
// Kubernetes pods later). It parses DLRover's ElasticJob YAML (or a bare
// spec), extracts the launcher line (dlrover-run, torchrun, python -m
// torch.distributed.run, rover run) from the training container's command and
// reads its flags with package runconfig, validates everything with errors
// that name the field path, and checks a spec against what a platform can
// honour ([Capabilities]), refusing what it cannot rather than ignoring it.
//
// It does not run jobs, talk to Kubernetes or look at the file system: the
// training script is resolved where the job runs.
//
// Usage:
//
//	spec, err := jobspec.ParseFile("job.yaml")
//	if err != nil {
//		return err // every problem, each naming its field path
//	}
//	if err := spec.Check(jobspec.LocalCapabilities); err != nil {
//		return err // fields the local platform cannot honour
//	}
//	w := spec.Replicas[jobspec.Worker]
//	_ = w.Launch // the "rover run" flags each node runs, or nil
//
// The flags form gives the same JobSpec:
//
//	cfg, err := jobspec.ParseLaunchArgs([]string{"--nnodes=2:3", "train.py"})
//	spec := jobspec.FromRunConfig(cfg)
package jobspec
