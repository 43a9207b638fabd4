package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/metrics/metricstest"

	dto "github.com/prometheus/client_model/go"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestAgentMetrics runs `rover run --standalone --metrics-addr
// 127.0.0.1:0`: the agent names its metrics' address in
// --metrics-addr-file, serves its two workers' state and /proc usage there
// with its embedded master's job metrics, and promtool finds nothing to
// lint in them; the embedded master's dashboard is served beside them.
func TestAgentMetrics(t *testing.T) {
	t.Parallel()
	_, worker := binaries(t)
	dir := t.TempDir()
	addrFile, stop := filepath.Join(dir, "metrics.addr"), filepath.Join(dir, "stop")
	r := startRun(t, []string{"ROVER_METRICS_ADDR=127.0.0.1:0"}, "--standalone", "--nproc-per-node", "2",
		"--metrics-addr-file", addrFile, "--no-python", worker, "--run-until", stop)
	if err := r.stderr.WaitFor(deadline, r.done, "serving metrics"); err != nil {
		t.Fatalf("%v; stderr:\n%s", err, r.stderr)
	}
	addr, err := os.ReadFile(addrFile)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + strings.TrimSpace(string(addr)) + "/metrics"
	body, fams := metricstest.Await(t, url, deadline, "2 running workers with their memory", func(fams map[string]*dto.MetricFamily) bool {
		for _, m := range fams["rover_agent_workers"].GetMetric() {
			if labelOf(m, "state") == "running" && m.GetGauge().GetValue() == 2 {
				return len(fams["rover_agent_worker_resident_bytes"].GetMetric()) == 2
			}
		}
		return false
	})
	for _, m := range fams["rover_agent_worker_resident_bytes"].GetMetric() {
		if m.GetGauge().GetValue() <= 0 {
			t.Errorf("local rank %s has no resident memory", labelOf(m, "local_rank"))
		}
	}
	if ws := fams["rover_job_world_size"].GetMetric(); len(ws) != 1 || ws[0].GetGauge().GetValue() != 2 {
		t.Errorf("the embedded master's world size is not served with the agent's metrics: %v", ws)
	}
	if rl := fams["rover_job_node_relaunches_total"].GetMetric(); len(rl) != 8 || labelOf(rl[0], "cause") == "" {
		t.Errorf("relaunches %v, want a series for each of the 8 causes", rl)
	}
	if fams["process_cpu_seconds_total"] == nil {
		t.Error("no process_* metrics")
	}
	metricstest.Promtool(t, body)
	base := "http://" + strings.TrimSpace(string(addr))
	page := metricstest.Get(t, base+"/")
	if !strings.Contains(page, "<script src=") {
		t.Errorf("the embedded master's dashboard is not served at / on the metrics address:\n%s", page)
	}
	var job roverv1.GetJobResponse
	if b := metricstest.Get(t, base+"/api/job"); protojson.Unmarshal([]byte(b), &job) != nil || len(job.GetNodes()) != 1 {
		t.Errorf("the dashboard's /api/job is not the embedded master's job of one node: %s", b)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t); code != 0 {
		t.Errorf("rover run exited %d; stderr:\n%s", code, r.stderr)
	}
}
func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
