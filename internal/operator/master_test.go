package operator

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestMasterPodServesMetrics: the master pod serves its Prometheus metrics
// on the named container port "metrics" (9400), and its annotations tell
// an annotation-driven Prometheus to scrape it there.
func TestMasterPodServesMetrics(t *testing.T) {
	pod := masterPod(newJob("ns", "ddp"), 0, MasterConfig{Image: "rover:1"})
	c := pod.Spec.Containers[0]
	if i := slices.Index(c.Command, "--metrics-addr"); i < 0 || i+1 >= len(c.Command) || c.Command[i+1] != "0.0.0.0:9400" {
		t.Errorf("the master's command %q does not serve metrics on 0.0.0.0:9400", c.Command)
	}
	if !slices.Contains(c.Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: 9400, Protocol: corev1.ProtocolTCP}) {
		t.Errorf("the master's ports %v lack metrics (9400)", c.Ports)
	}
	want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9400", "prometheus.io/path": "/metrics"}
	if diff := cmp.Diff(want, pod.Annotations); diff != "" {
		t.Errorf("the master pod's annotations (-want +got):\n%s", diff)
	}
}
