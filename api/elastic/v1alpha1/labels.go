package v1alpha1

import (
	"strconv"

	"k8s.io/apimachinery/pkg/labels"
)

// Label keys and values on the pods, services and ScalePlans of a job, as in
// DLRover, so that tools written for DLRover's pods find Rover's.
const (
	// LabelApp is "app"; its value on every object of a job is AppValue.
	LabelApp = "app"
	// AppValue is the value of LabelApp: "dlrover".
	AppValue = "dlrover"
	// LabelJobName is the ElasticJob's name.
	LabelJobName = "elasticjob.dlrover/name"
	// LabelReplicaType is the node's replica type (worker, dlrover-master).
	LabelReplicaType = "elasticjob.dlrover/replica-type"
	// LabelReplicaIndex is the node's id: unique in the job, never reused.
	LabelReplicaIndex = "elasticjob.dlrover/replica-index"
	// LabelRankIndex is the node's rank: stable across relaunches.
	LabelRankIndex = "elasticjob.dlrover/rank-index"
	// LabelRelaunchCount is how many times the node's rank was relaunched
	// before this pod.
	LabelRelaunchCount = "elasticjob.dlrover/relaunch-count"
	// LabelScaleType marks who wrote a ScalePlan: ScaleTypeManual (a
	// user) or ScaleTypeAuto (the master).
	LabelScaleType = "scale-type"
	// ScaleTypeManual is the value of LabelScaleType on a manual ScalePlan.
	ScaleTypeManual = "manual"
	// ScaleTypeAuto is the value of LabelScaleType on a ScalePlan the
	// job's master wrote for its own auto-scaling change (DLRover's "auto").
	ScaleTypeAuto = "auto"
)

// JobLabels returns the labels of every object of job: app and the job's
// name.
func JobLabels(job string) map[string]string {
	return map[string]string{LabelApp: AppValue, LabelJobName: job}
}

// ReplicaLabels returns the labels of the pods of one replica type of job.
func ReplicaLabels(job string, t ReplicaType) map[string]string {
	l := JobLabels(job)
	l[LabelReplicaType] = string(t)
	return l
}

// NodeLabels returns the labels of one node's pod: its job, type, id, rank
// and relaunch count.
func NodeLabels(job string, t ReplicaType, id, rank, relaunches int) map[string]string {
	l := ReplicaLabels(job, t)
	l[LabelReplicaIndex] = strconv.Itoa(id)
	l[LabelRankIndex] = strconv.Itoa(rank)
	l[LabelRelaunchCount] = strconv.Itoa(relaunches)
	return l
}

// ManualScaleLabels returns the labels of a ScalePlan a user writes for job.
func ManualScaleLabels(job string) map[string]string {
	return map[string]string{LabelJobName: job, LabelScaleType: ScaleTypeManual}
}

// WorkerSelector returns the label selector of job's worker pods in string
// form, as status.selector holds it for the scale subresource.
func WorkerSelector(job string) string {
	return labels.SelectorFromSet(ReplicaLabels(job, Worker)).String()
}
