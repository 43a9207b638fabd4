package metrics

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestAgentWorkers: the workers by state follow the groups, restarts count
// the groups after the first, and a running worker's RSS and CPU come from
// its /proc (this test process stands in for the worker).
func TestAgentWorkers(t *testing.T) {
	a := NewAgent(func() int64 { return 1 << 20 })
	workers := func(running, failed float64) string {
		return `
# HELP rover_agent_workers The agent's worker processes by state: those of the running group, or else of the last group, by how it ended.
# TYPE rover_agent_workers gauge
rover_agent_workers{state="failed"} ` + ftoa(failed) + `
rover_agent_workers{state="running"} ` + ftoa(running) + `
rover_agent_workers{state="stopped"} 0
rover_agent_workers{state="succeeded"} 0
`
	}
	self := []Worker{{Local: 0, Pid: os.Getpid()}, {Local: 1, Pid: os.Getpid()}}
	a.WorkersStarted(self)
	if err := testutil.GatherAndCompare(a.Gatherer(), strings.NewReader(workers(2, 0)), "rover_agent_workers"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(a.restarts); got != 0 {
		t.Errorf("restarts after the first group = %v, want 0", got)
	}
	fams := gather(t, a.Gatherer())
	for _, name := range []string{"rover_agent_worker_resident_bytes", "rover_agent_worker_cpu_seconds_total"} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 2 {
			t.Fatalf("%s: want a series per local rank, got %v", name, f)
		}
	}
	if rss := fams["rover_agent_worker_resident_bytes"].GetMetric()[0].GetGauge().GetValue(); rss < 1<<20 {
		t.Errorf("the worker's resident memory is %v bytes: not read from /proc", rss)
	}
	if got := fams["rover_agent_shm_bytes"].GetMetric()[0].GetGauge().GetValue(); got != 1<<20 {
		t.Errorf("shm bytes = %v, want what the saver says", got)
	}
	a.WorkersEnded(WorkersFailed)
	if err := testutil.GatherAndCompare(a.Gatherer(), strings.NewReader(workers(0, 2)), "rover_agent_workers"); err != nil {
		t.Error(err)
	}
	if f := gather(t, a.Gatherer())["rover_agent_worker_resident_bytes"]; f != nil {
		t.Errorf("a group that ended still has worker processes: %v", f)
	}
	a.WorkersStarted(self[:1])
	if got := testutil.ToFloat64(a.restarts); got != 1 {
		t.Errorf("restarts after the second group = %v, want 1", got)
	}
	a.Saved(30*time.Millisecond, 1000)
	a.Persisted(2*time.Second, 1000)
	if got := testutil.ToFloat64(a.persistBytes); got != 1000 {
		t.Errorf("persisted bytes = %v, want 1000", got)
	}
	if problems, err := testutil.GatherAndLint(a.Gatherer()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestAgentServesItsMaster: a master the agent hosts is gathered with the
// agent's metrics.
func TestAgentServesItsMaster(t *testing.T) {
	a := NewAgent(nil)
	m := NewMaster(scriptedJob, false)
	a.Add(m.Registry())
	fams := gather(t, a.Gatherer())
	for _, name := range []string{"rover_agent_workers", "rover_job_round", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("the agent does not serve %s", name)
		}
	}
}

// TestNilMetricsRecordNothing: an agent or master without --metrics-addr
// calls the same methods on nil.
func TestNilMetricsRecordNothing(t *testing.T) {
	var a *Agent
	a.WorkersStarted([]Worker{{Pid: 1}})
	a.WorkersEnded(WorkersFailed)
	a.Saved(time.Second, 1)
	a.Persisted(time.Second, 1)
	a.Add(prometheus.NewRegistry())
	var m *Master
	m.Committed(time.Second, 1)
	m.RoundFormed(time.Second)
	if m.Interceptor() == nil {
		t.Error("a nil master's interceptor is nil")
	}
}

func TestParseProcStat(t *testing.T) {
	// A command with spaces and a parenthesis, as /proc shows it.
	line := "1234 (py (th) on) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 500000 300 18446744073709551615"
	u, ok := parseProcStat(line)
	if !ok || u.cpuSeconds != 3 || u.rssBytes != 300*int64(os.Getpagesize()) {
		t.Errorf("parseProcStat = %+v, %v; want 3 CPU seconds and 300 pages", u, ok)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 x S"} {
		if _, ok := parseProcStat(bad); ok {
			t.Errorf("parseProcStat(%q) is ok", bad)
		}
	}
	if _, ok := readProcUsage(-1); ok {
		t.Error("a process that does not exist has usage")
	}
}

func gather(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
