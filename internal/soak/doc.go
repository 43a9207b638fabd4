// Package soak runs a real DDP job on this machine under a schedule of
// faults, once under Rover (a `rover master` process on a state dir and one
// `rover run` agent per node, flash checkpoints) and once as a plain
// torchrun user would run it (PyTorch's launcher, or soak's own
// restart-every-worker loop where that launcher cannot start on this
// Python, with a torch.save checkpoint), and reports both jobs' goodput
// computed offline from the workers' own step logs, beside the goodput the
// Rover master reports. It owns the fault injection and the offline
// account; it does not change how Rover runs a job. `rover soak` is its
// command; docs/user-guide.md#soak-goodput-under-faults tells how to read
// the report.
package soak
