package master

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/metrics/metricstest"

	"connectrpc.com/connect"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/metrics"
	"github.com/roverml/rover/internal/store"
)

// TestMetricsOfAJob: a master with MetricsAddr serves, on a port of its
// own named in MetricsAddrFile, metrics that follow its job through a
// round, a failure restart and the next round: rounds timed, RPCs timed by
// procedure, journal commits timed; and promtool finds nothing to lint.
func TestMetricsOfAJob(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "metrics.addr")
	m, c := startMaster(t, Config{Job: "job1", MetricsAddr: "127.0.0.1:0", MetricsAddrFile: addrFile})
	addr, err := os.ReadFile(addrFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(addr)); got != m.MetricsServer().Addr() || got == m.Addr() {
		t.Fatalf("metrics address file says %q; the metrics serve on %s, the API on %s", got, m.MetricsServer().Addr(), m.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := rdzvConfig(2, 2)
	var streams []session
	for i, id := range []string{"a", "b"} {
		streams = append(streams, openSessionRank(ctx, t, c, id, i, cfg))
	}
	for _, s := range streams {
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment() != nil })
	}
	if _, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "a", Round: 1,
		Failures: []*roverv1.WorkerFailure{{Rank: 1, ExitCode: 1, Message: "boom"}}})); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		req := joinReq(id, cfg)
		req.Msg.Round = 2
		req.Msg.RequestedRank = map[string]int32{"a": 0, "b": 1}[id]
		if _, err := c.Join(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	nextView(t, streams[0], func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 2 })

	body := metricstest.Get(t, "http://"+string(bytes.TrimSpace(addr))+"/metrics")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v\n%s", err, body)
	}
	value := func(name string, labels map[string]string) float64 {
		for _, mt := range fams[name].GetMetric() {
			match := true
			for _, l := range mt.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					match = false
				}
			}
			if !match {
				continue
			}
			switch {
			case mt.Gauge != nil:
				return mt.GetGauge().GetValue()
			case mt.Counter != nil:
				return mt.GetCounter().GetValue()
			case mt.Histogram != nil:
				return float64(mt.GetHistogram().GetSampleCount())
			}
		}
		t.Errorf("no %s%v in the metrics:\n%s", name, labels, body)
		return -1
	}
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rover_job_round", nil, 2},
		{"rover_job_round_open", nil, 0},
		{"rover_job_world_size", nil, 4},
		{"rover_job_restarts_total", nil, 1},
		{"rover_job_nodes", map[string]string{"state": "in_world"}, 2},
		{"rover_job_state", map[string]string{"state": "running"}, 1},
		{"rover_rendezvous_duration_seconds", nil, 2},
	} {
		if got := value(w.name, w.labels); got != w.want {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.want)
		}
	}
	if n := value("rover_rpc_duration_seconds", map[string]string{"procedure": "/rover.v1.MasterService/Join", "code": "ok"}); n < 2 {
		t.Errorf("%v Join calls timed, want 2", n)
	}
	if n := value("rover_journal_commit_duration_seconds", nil); n < 1 {
		t.Errorf("%v journal commits timed, want some", n)
	}
	if fams["go_goroutines"] == nil || fams["process_cpu_seconds_total"] == nil {
		t.Error("the master's metrics lack the process's go_* and process_*")
	}
	metricstest.Promtool(t, body)
}

// TestNoMetricsByDefault: without MetricsAddr a master serves no metrics
// and times nothing.
func TestNoMetricsByDefault(t *testing.T) {
	m, _ := startMaster(t, Config{Job: "job1"})
	if m.MetricsServer() != nil || m.MetricsGatherer() != nil || m.core.metrics != nil {
		t.Error("a master without MetricsAddr has metrics")
	}
}

// TestNodeCounts: the scrape's node counts agree with GetJob's nodes: a
// node whose heartbeats stopped is lost (and no longer in the world), one
// that joined the next round waits.
func TestNodeCounts(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := restoredCore(t, store.NewMemory(), 3, now)
	for _, id := range []string{"a", "b", "c"} {
		joinNode(t, c, id, 3, 1, now)
	}
	c.mu.Lock()
	got := c.nodeCountsLocked()
	c.mu.Unlock()
	if want := (metrics.NodeCounts{InWorld: 3}); got != want {
		t.Fatalf("a world of 3: counts %+v, want %+v", got, want)
	}
	// a and b beat on; c falls silent past the heartbeat timeout (60s).
	later := now.Add(61 * time.Second)
	for _, id := range []string{"a", "b"} {
		if err := c.seen(id, later.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.tick(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	got = c.nodeCountsLocked()
	c.mu.Unlock()
	var fromJob metrics.NodeCounts
	for _, n := range c.job().GetNodes() {
		switch {
		case n.GetLost():
			fromJob.Lost++
		case n.GetGroupRank() >= 0:
			fromJob.InWorld++
		default:
			fromJob.Waiting++
		}
	}
	t.Logf("after c was lost: %+v", got)
	if got != fromJob || got.Lost != 1 {
		t.Errorf("after c was lost: counts %+v, GetJob's nodes %+v; want them equal, with c lost", got, fromJob)
	}
}

// TestDashboardOnTheMetricsAddress: the master's metrics listener serves
// the web dashboard too, its page and its API, next to /metrics.
func TestDashboardOnTheMetricsAddress(t *testing.T) {
	m, _ := startMaster(t, Config{Job: "job1", MetricsAddr: "127.0.0.1:0"})
	base := "http://" + m.MetricsServer().Addr()
	if page := metricstest.Get(t, base+"/"); !strings.Contains(page, "<html") {
		t.Errorf("the dashboard's page is not at /:\n%.300s", page)
	}
	if job := metricstest.Get(t, base+"/api/job"); !strings.Contains(job, `"runId":"job1"`) {
		t.Errorf("/api/job does not answer the job's status:\n%.300s", job)
	}
	if body := metricstest.Get(t, base+"/metrics"); !strings.Contains(body, "rover_job_round") {
		t.Errorf("/metrics lost the metrics:\n%.300s", body)
	}
}
