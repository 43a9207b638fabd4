// Package kubenames names the Kubernetes objects of a job's master: the
// Service agents reach it by, its pods, its token Secret, and the port it
// serves on. The operator makes these objects (package operator); the
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
