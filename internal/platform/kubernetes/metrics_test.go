package kubernetes

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestPodExposesMetrics: with MetricsAddr, a node's agent gets
// ROVER_METRICS_ADDR and its pod the container port "metrics" and
// Prometheus's scrape annotations; what the template says wins; a pod on
// the host's network gets them only from its template; without
// MetricsAddr the pod is the template's.
func TestPodExposesMetrics(t *testing.T) {
	type want struct {
		env         string // ROVER_METRICS_ADDR, "" none
		ports       []corev1.ContainerPort
		annotations map[string]string
	}
	metricsPort := corev1.ContainerPort{Name: "metrics", ContainerPort: 9400, Protocol: corev1.ProtocolTCP}
	scrape := map[string]string{"note": "kept", "prometheus.io/scrape": "true", "prometheus.io/port": "9400", "prometheus.io/path": "/metrics"}
	tests := []struct {
		name string
		addr string
		edit func(*corev1.PodTemplateSpec)
		want want
	}{
		{"off", "", nil, want{annotations: map[string]string{"note": "kept"}}},
		{"on", "0.0.0.0:9400", nil, want{"0.0.0.0:9400", []corev1.ContainerPort{metricsPort}, scrape}},
		{"the template's own address and scrape settings", "0.0.0.0:9400", func(tp *corev1.PodTemplateSpec) {
			tp.Annotations["prometheus.io/scrape"] = "false"
			tp.Spec.Containers[1].Env = append(tp.Spec.Containers[1].Env, corev1.EnvVar{Name: "ROVER_METRICS_ADDR", Value: ":9500"})
		}, want{":9500", []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9500, Protocol: corev1.ProtocolTCP}},
			map[string]string{"note": "kept", "prometheus.io/scrape": "false"}}},
		{"the template turns them off", "0.0.0.0:9400", func(tp *corev1.PodTemplateSpec) {
			tp.Spec.Containers[1].Env = append(tp.Spec.Containers[1].Env, corev1.EnvVar{Name: "ROVER_METRICS_ADDR", Value: ""})
		}, want{annotations: map[string]string{"note": "kept"}}},
		{"on the host's network", "0.0.0.0:9400", func(tp *corev1.PodTemplateSpec) { tp.Spec.HostNetwork = true },
			want{annotations: map[string]string{"note": "kept"}}},
		{"on the host's network, with the template's address", "0.0.0.0:9400", func(tp *corev1.PodTemplateSpec) {
			tp.Spec.HostNetwork = true
			tp.Spec.Containers[1].Env = append(tp.Spec.Containers[1].Env, corev1.EnvVar{Name: "ROVER_METRICS_ADDR", Value: ":9500"})
		}, want{":9500", []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9500, Protocol: corev1.ProtocolTCP}},
			map[string]string{"note": "kept", "prometheus.io/scrape": "true", "prometheus.io/port": "9500", "prometheus.io/path": "/metrics"}}},
		{"the template's port named metrics", "0.0.0.0:9400", func(tp *corev1.PodTemplateSpec) {
			tp.Spec.Containers[1].Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9400}}
		}, want{"0.0.0.0:9400", []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9400}}, scrape}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := template()
			if tt.edit != nil {
				tt.edit(&tmpl)
			}
			p, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Job: "job", JobUID: "uid-1",
				Template: tmpl, MasterAddr: "m:29400", TokenSecret: "tok", MetricsAddr: tt.addr})
			if err != nil {
				t.Fatal(err)
			}
			pod, err := p.Pod(nodeSpec("job", 0, 0))
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[1]
			var got want
			for _, e := range c.Env {
				if e.Name == "ROVER_METRICS_ADDR" {
					got.env = e.Value
				}
			}
			got.ports, got.annotations = c.Ports, pod.Annotations
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("metrics of the pod (-want +got):\n%s", diff)
			}
			if len(tmpl.Spec.Containers[1].Ports) > 1 || len(tmpl.Annotations) > 2 {
				t.Error("the template was changed")
			}
		})
	}
}
