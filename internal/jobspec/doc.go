// Package jobspec owns the declarative description of a training job: what
// "rover submit job.yaml" runs on a platform (processes on this machine, or
// Kubernetes pods). It parses DLRover's ElasticJob YAML (or a bare spec)
// within fixed bounds on size and YAML aliases (document.go), refusing
// duplicate keys; accepts a whole Kubernetes pod template; extracts the
// launcher (dlrover-run, torchrun, python -m torch.distributed.run, rover
// run) from the training container's command, directly or inside an
// ordinary shell line (shell.go, static.go), and reads its flags with
// package runconfig; validates everything with errors that name the field
// path; and checks a spec against what a platform can honour
// ([Capabilities]): Check refuses what would run wrongly, Notes lists what a
// platform ignores or changes.
//
// It does not run jobs, talk to Kubernetes or look at the file system: the
// training script is resolved where the job runs.
//
// Usage:
//
//	spec, err := jobspec.ParseFileFor("job.yaml", jobspec.LocalCapabilities)
//	if err != nil {
//		return err // every problem, the spec's and the platform's, each naming its field path
//	}
//	for _, n := range spec.Notes(jobspec.LocalCapabilities) {
//		log.Print("warning: ", n) // what the platform ignores
//	}
//	w := spec.Replicas[jobspec.Worker]
//	_ = w.Launch // the "rover run" flags each node runs, or nil
//
// The flags form gives the same JobSpec:
//
//	cfg, err := jobspec.ParseLaunchArgs([]string{"--nnodes=2:3", "train.py"})
//	spec := jobspec.FromRunConfig(cfg)
package jobspec
