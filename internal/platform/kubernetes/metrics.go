package kubernetes

import (
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roverml/rover/internal/kubenames"
)

// metricsAddrEnv is the agent's variable of --metrics-addr.
const metricsAddrEnv = "ROVER_METRICS_ADDR"

// exposeMetrics makes a node's agent serve its metrics on
// Options.MetricsAddr and its pod say so: the container port "metrics"
// and the prometheus.io annotations. What the template sets wins: its
// ROVER_METRICS_ADDR, a port already named "metrics" or numbered as the
// metrics', its own prometheus.io/scrape. A pod on the host's network gets
// none: two of them on one node (or one next to the master) would take
// the same port, and an agent that cannot listen where it is told does not
// start; such a template sets ROVER_METRICS_ADDR itself.
func (p *Platform) exposeMetrics(meta *metav1.ObjectMeta, spec *corev1.PodSpec, c *corev1.Container) {
	addr := p.opts.MetricsAddr
	if addr == "" {
		return
	}
	if spec.HostNetwork && !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == metricsAddrEnv }) {
		return
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == metricsAddrEnv }); i >= 0 {
		addr = c.Env[i].Value
	} else {
		c.Env = append(c.Env, corev1.EnvVar{Name: metricsAddrEnv, Value: addr})
	}
	_, portText, err := net.SplitHostPort(addr)
	port, err2 := strconv.Atoi(portText)
	if err != nil || err2 != nil || port <= 0 {
		return // off, or a port Prometheus cannot be told in advance
	}
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == kubenames.MetricsPortName || cp.ContainerPort == int32(port)
	}) {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: kubenames.MetricsPortName, ContainerPort: int32(port), Protocol: corev1.ProtocolTCP})
	}
	if _, set := meta.Annotations["prometheus.io/scrape"]; set {
		return
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	for k, v := range kubenames.PrometheusAnnotations() {
		meta.Annotations[k] = v
	}
	meta.Annotations["prometheus.io/port"] = strconv.Itoa(port)
}
