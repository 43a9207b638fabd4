// Package kubenames names the Kubernetes objects of a job's master: the
// Service agents reach it by, its pods, its token Secret, and the port it
// serves on; and those the master makes for a parameter-server job: a
// Service per replica and the ConfigMap of the cluster version. The operator makes these objects (package operator); the
// master in a pod and the platform find them by the same names (package
// kubemaster), so the names live here, apart from both. It owns no object
// and imports nothing: changing a name here changes what existing jobs'
// objects are called.
package kubenames

import (
	"fmt"
	"strconv"
)

// MasterPort is the port the master serves on, in its pod and on its
// Service; MasterPortName is the port's name there.
const (
	MasterPort     = 29400
	MasterPortName = "rover"
)

// MetricsPort is the port a job's master and agents serve their Prometheus
// metrics on in their pods (--metrics-addr), and MetricsPortName the
// container port's name there; MetricsPath is where.
const (
	MetricsPort     = 9400
	MetricsPortName = "metrics"
	MetricsPath     = "/metrics"
)

// PrometheusAnnotations are the annotations that tell a Prometheus with
// the usual pod-annotation scrape config to scrape a pod's metrics.
func PrometheusAnnotations() map[string]string {
	return map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   strconv.Itoa(MetricsPort),
		"prometheus.io/path":   MetricsPath,
	}
}

// MetricsAddr is the --metrics-addr of a job's pods.
func MetricsAddr() string { return fmt.Sprintf("0.0.0.0:%d", MetricsPort) }

// TokenKey is the key of the token in the job's token Secret.
const TokenKey = "token"

// MasterService returns the name of job's master Service.
func MasterService(job string) string { return job + "-rover-master" }

// MasterPod returns the name of job's master pod after n relaunches.
func MasterPod(job string, n int32) string {
	return MasterService(job) + "-" + strconv.Itoa(int(n))
}

// TokenSecret returns the name of job's token Secret.
func TokenSecret(job string) string { return job + "-rover-token" }

// MasterAddr returns the address inside the cluster of the master of job in
// namespace: its Service's name and port.
func MasterAddr(job, namespace string) string {
	return fmt.Sprintf("%s.%s.svc:%d", MasterService(job), namespace, MasterPort)
}

// ReplicaPort is the port every replica of a parameter-server job serves
// on in its pod, and its Service's port (TensorFlow's documented 2222).
const ReplicaPort = 2222

// ReplicaService returns the name of the Service of replica index of role
// (ps, worker, chief, evaluator) of a parameter-server job: DLRover's
// "<job>-edljob-<role>-<index>". It selects whichever pod runs that
// replica, so the replica's address outlives its relaunches.
func ReplicaService(job, role string, index int) string {
	return fmt.Sprintf("%s-edljob-%s-%d", job, role, index)
}

// ReplicaAddr returns the address inside the cluster of replica index of
// role: its Service's name and port, as TF_CONFIG lists it.
func ReplicaAddr(job, namespace, role string, index int) string {
	return fmt.Sprintf("%s.%s.svc:%d", ReplicaService(job, role, index), namespace, ReplicaPort)
}

// ClusterConfigMap returns the name of the ConfigMap holding a
// parameter-server job's cluster version, which its pods mount.
func ClusterConfigMap(job string) string { return job + "-rover-cluster" }
