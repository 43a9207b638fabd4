package ckptsaver

import "errors"

// errNoStorage: a worker asked to persist or restore a checkpoint in a job
// that has no checkpoint storage.
var errNoStorage = errors.New("this job has no checkpoint storage: name it in the script, Checkpointer(DIR_OR_URL), " +
	"or start the job with --checkpoint-dir DIR_OR_URL (on every `rover run`, or on `rover master`) to persist checkpoints")

// errPersisterStopped: a persistence was asked for after the persister
// stopped and closed storage. The agent stops its persister only after its
// loop's last persistence, so this is a bug in the agent's stop order.
var errPersisterStopped = errors.New("the agent's persister has stopped and closed the checkpoint storage")
