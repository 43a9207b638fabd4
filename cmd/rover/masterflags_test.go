package main

import (
	"testing"
)

// TestMasterFlagCombinations covers the flags of `rover master` that take
// effect only with others: the checkpoint storage's, the Kubernetes
// platform's and the API limits', and the preset's checks against each
// other. Every problem is reported, in order, each naming its flag.
func TestMasterFlagCombinations(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "") // --namespace's default
	t.Setenv("KUBECONFIG", "")    // --kubeconfig's default
	t.Setenv("ROVER_METRICS_ADDR", "")
	tests := []struct {
		name string
		args []string
		want []string // every line of the error
	}{
		{"checkpoint keep without a dir", []string{"--checkpoint-keep", "3"},
			[]string{"--checkpoint-keep=3 takes effect only with --checkpoint-dir"}},
		{"a bad checkpoint keep without a dir", []string{"--checkpoint-keep", "x"},
			[]string{"--checkpoint-keep=x: want a whole number", "--checkpoint-keep=x takes effect only with --checkpoint-dir"}},
		{"a bad checkpoint keep and linger", []string{"--checkpoint-dir", "/tmp/ck", "--checkpoint-keep", "x", "--linger", "800h"},
			[]string{"--checkpoint-keep=x: want a whole number",
				"--linger=800h0m0s: must be at most 720h (30 days), the longest duration Rover accepts"}},
		{"state kube with two slashes, API limits at zero", []string{"--state-kube", "a/b/c", "--state-dir", "d", "--kube-api-qps", "0", "--kube-api-burst", "0"},
			[]string{"--state-kube=a/b/c: want NAMESPACE/NAME, such as team-a/llama-rover-master-state",
				"--kube-api-qps=0: want a number of requests per second above 0, such as 200",
				"--kube-api-burst=0: want a whole number of requests of 1 or more, such as 400"}},
		{"Kubernetes flags without Kubernetes", []string{"--kube-api-qps", "10", "--kube-api-burst", "1", "--namespace", "x", "--kubeconfig", "y"},
			[]string{"--kube-api-burst=1: must be at least --kube-api-qps (10)",
				"--kube-api-qps takes effect only with --platform kubernetes or --state-kube",
				"--kube-api-burst takes effect only with --platform kubernetes or --state-kube",
				"--namespace takes effect only with --platform kubernetes",
				"--kubeconfig takes effect only with --platform kubernetes"}},
		{"Kubernetes without its job, with what the job sets", []string{"--platform", "kubernetes", "--nnodes", "2", "--checkpoint-dir", "/x", "--max-restarts", "2"},
			[]string{"--platform kubernetes needs --namespace (or $POD_NAMESPACE) and --job: the ElasticJob to run",
				"--nnodes: with --platform kubernetes the ElasticJob's command sets it",
				"--checkpoint-dir: with --platform kubernetes the ElasticJob's command sets it",
				"--max-restarts: with --platform kubernetes the ElasticJob's command sets it"}},
		{"a metrics address without a port, and an address file alone", []string{"--metrics-addr", "localhost"},
			[]string{`--metrics-addr: "localhost" is not HOST:PORT (e.g. 0.0.0.0:9400, or :0 to pick a port; IPv6 as [::1]:9400)`}},
		{"a metrics address file without the address", []string{"--metrics-addr-file", "m.addr"},
			[]string{"--metrics-addr-file takes effect only with --metrics-addr: give the address to serve the metrics on"}},
		{"an unknown platform", []string{"--platform", "mesos"},
			[]string{"--platform=mesos: want kubernetes, or leave it out for agents started by hand"}},
		{"discard state and a lone TLS key", []string{"--discard-state", "--tls-key", "k"},
			[]string{"--discard-state takes effect only with --state-dir: a master without one has no journal to discard",
				"--tls-cert and --tls-key go together: give both to serve TLS, or neither to serve cleartext HTTP/2"}},
		{"hang detection out of range", []string{"--nnodes", "2", "--max-restarts", "3", "--hang-detection", "7", "--hang-timeout", "0"},
			[]string{"--hang-detection=7: want 0 (log a hang), 1 (also warn) or 2 (also restart the workers)"}},
		{"a node unit above the maximum", []string{"--nnodes", "1:1", "--node-unit", "2"},
			[]string{"--node-unit=2 is more than the maximum of 1 nodes (--nnodes=1); lower --node-unit or raise --nnodes"}},
		{"bad values of the preset and linger", []string{"--linger", "x", "--nnodes", "3:1", "--node-unit", "q"},
			[]string{"--linger=x: want seconds (e.g. 30 or 0.5) or a duration (e.g. 500ms or 10m)",
				"--node-unit=q: want a whole number",
				"--nnodes=3:1: minimum 3 is greater than maximum 1; write --nnodes=MIN:MAX with MIN <= MAX"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantMasterFlagErrors(t, tt.args, tt.want) })
	}
}
