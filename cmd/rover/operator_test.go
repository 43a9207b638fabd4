package main

import (
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/roverml/rover/internal/operator"
)

func TestOperatorFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want operatorConfig
	}{
		{"defaults", nil, nil, operatorConfig{Config: operator.Config{
			Master:      operator.MasterConfig{Image: "rover:latest", ServiceAccount: "rover-master"},
			Namespace:   "rover-system",
			LeaderElect: true,
			MetricsAddr: "0",
			ProbeAddr:   ":8081",
			WebhookAddr: ":9443",
		}}},
		{"in a pod", []string{"--leader-elect=false", "--master-image", "reg/rover:v1", "--master-image-pull-policy", "IfNotPresent", "--metrics-bind-address", ":8080",
			"--webhook-cert-dir=/etc/rover/webhook", "--webhook-bind-address=:9444"},
			map[string]string{"POD_NAMESPACE": "ops"}, operatorConfig{Config: operator.Config{
				Master:         operator.MasterConfig{Image: "reg/rover:v1", PullPolicy: "IfNotPresent", ServiceAccount: "rover-master"},
				Namespace:      "ops",
				MetricsAddr:    ":8080",
				ProbeAddr:      ":8081",
				WebhookCertDir: "/etc/rover/webhook",
				WebhookAddr:    ":9444",
			}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseOperatorFlags(tc.args, io.Discard, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, *got, cmpopts.IgnoreUnexported(operator.Config{})); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}
