package operator

import (
	"fmt"
	"strconv"
	"strings"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// masterState is what the operator makes of a job's current master pod.
type masterState int

const (
	// masterGone: there is no pod (never made, or deleted): relaunch.
	masterGone masterState = iota
	// masterPending: the pod waits to be placed or started.
	masterPending
	// masterRunning: the master runs.
	masterRunning
	// masterTerminating: the pod is being deleted but still runs; wait
	// for it to go, so that two masters never run at once.
	masterTerminating
	// masterSucceeded: the master exited 0: the job succeeded.
	masterSucceeded
	// masterJobFailed: the master exited 1: the job failed.
	masterJobFailed
	// masterRefused: the master exited 2, a command line it refuses; a
	// relaunch would be refused the same way.
	masterRefused
	// masterLost: the master failed otherwise (a crash, a signal, out of
	// memory, an eviction): relaunch.
	masterLost
)

// Exit codes of rover master (docs/exit-codes.md) that end the job.
const (
	exitJobFailed = 1
	exitUsage     = 2
)

// masterObservation is a master pod's state and a sentence saying why.
type masterObservation struct {
	state   masterState
	message string
}

// observeMaster classifies pod, the job's current master pod (nil when it
// does not exist).
func observeMaster(pod *corev1.Pod) masterObservation {
	if pod == nil {
		return masterObservation{masterGone, "the master pod is gone (deleted)"}
	}
	name := pod.Name
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return masterObservation{masterSucceeded, "the master exited 0: the job succeeded"}
	case corev1.PodFailed:
		return observeFailed(pod)
	}
	if pod.DeletionTimestamp != nil {
		return masterObservation{masterTerminating, fmt.Sprintf("the master pod %s is being deleted", name)}
	}
	if pod.Status.Phase == corev1.PodRunning {
		return masterObservation{masterRunning, fmt.Sprintf("the master pod %s runs", name)}
	}
	return masterObservation{masterPending, pendingMessage(pod)}
}

// observeFailed classifies a master pod in phase Failed.
func observeFailed(pod *corev1.Pod) masterObservation {
	t := terminated(pod)
	if t == nil {
		why := "failed"
		if pod.Status.Reason != "" {
			why = strings.ToLower(pod.Status.Reason) // Evicted, NodeLost, ...
		}
		if pod.Status.Message != "" {
			why += ": " + pod.Status.Message
		}
		return masterObservation{masterLost, fmt.Sprintf("the master pod %s %s", pod.Name, why)}
	}
	detail := strings.TrimSpace(t.Message)
	switch t.ExitCode {
	case exitJobFailed:
		if detail == "" {
			detail = fmt.Sprintf("the master exited 1: the job failed (kubectl logs %s)", pod.Name)
		}
		return masterObservation{masterJobFailed, detail}
	case exitUsage:
		msg := fmt.Sprintf("the master refused its command line (exit 2): check that --master-image is a Rover that matches the operator (kubectl logs %s)", pod.Name)
		if detail != "" {
			msg += ": " + detail
		}
		return masterObservation{masterRefused, msg}
	}
	msg := fmt.Sprintf("the master pod %s exited %d", pod.Name, t.ExitCode)
	if t.Signal != 0 {
		msg += " (signal " + strconv.Itoa(int(t.Signal)) + ")"
	}
	if t.Reason != "" && t.Reason != "Error" {
		msg += " (" + t.Reason + ")" // OOMKilled, ...
	}
	return masterObservation{masterLost, msg}
}

// terminated returns the master container's terminated state, or nil.
func terminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == MasterContainer {
			if c.State.Terminated != nil {
				return c.State.Terminated
			}
			return c.LastTerminationState.Terminated
		}
	}
	return nil
}

// pendingMessage says what a pending master pod waits for.
func pendingMessage(pod *corev1.Pod) string {
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == MasterContainer && c.State.Waiting != nil && c.State.Waiting.Reason != "" {
			msg := fmt.Sprintf("the master pod %s waits: %s", pod.Name, c.State.Waiting.Reason)
			if c.State.Waiting.Message != "" {
				msg += ": " + c.State.Waiting.Message
			}
			return msg
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return fmt.Sprintf("the master pod %s is not scheduled: %s", pod.Name, c.Message)
		}
	}
	return fmt.Sprintf("the master pod %s is pending", pod.Name)
}

// AnnotationMasterRestartCount is the job annotation of the master's
// relaunch budget: how many times the operator relaunches the job's master
// (default DefaultMasterRestartCount).
const (
	AnnotationMasterRestartCount = "rover.dev/master-restart-count"
	DefaultMasterRestartCount    = 3
)

// masterBudget returns how many times job's master may be relaunched.
func masterBudget(job *v1alpha1.ElasticJob) (int32, error) {
	v, ok := job.Annotations[AnnotationMasterRestartCount]
	if !ok {
		return DefaultMasterRestartCount, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("metadata.annotations[%s]: %q is not a count: give how many times the master may be relaunched, 0 or more (default %d)",
			AnnotationMasterRestartCount, v, DefaultMasterRestartCount)
	}
	return int32(n), nil
}
