package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/eventlog"
)

// autoScaleKnobs make the policy decide within seconds rather than
// minutes: a short warm-up, a window of 8 reports trusted from 6 (one
// node's heartbeats time the steps, once a second), a 5 s cool-down. The
// rest are the defaults.
const autoScaleKnobs = "--auto-scale=warmup-steps=5,warmup=2s,window=8,min-samples=6,cool-down=5s"

// TestAutoScaleSubmit runs a real DDP job (gloo, ElasticSampler, flash
// checkpoints) under `rover submit --auto-scale` with --nnodes 1:4 and a
// capacity of 4 nodes here, starting on one node. Its step time models
// the job's scaling curve (a sleep by world size beside real compute and
// all-reduce). A linear job grows one node at a time to 4 and holds there
// (at_max); a job that saturates at 2 nodes grows to 3, measures that the
// third node adds nothing, gives it back and holds at 2 (tried_and_lost).
// Every decision is in the event log and `rover status`; every sample of
// every epoch is trained exactly once across the changes.
func TestAutoScaleSubmit(t *testing.T) {
	t.Run("linear", func(t *testing.T) {
		autoScaleJob(t, "linear", []string{"grow 1>2", "grow 2>3", "grow 3>4"}, 4, "at_max")
	})
	t.Run("saturating", func(t *testing.T) {
		autoScaleJob(t, "saturating", []string{"grow 1>2", "grow 2>3", "shrink 3>2"}, 2, "tried_and_lost")
	})
}

var masterAtRE = regexp.MustCompile(`master at (\S+),`)

func autoScaleJob(t *testing.T, curve string, changes []string, settle int, hold string) {
	dir := t.TempDir()
	stop := filepath.Join(dir, "stop")
	job := uniqueJob("autoscale-" + curve)
	s := submit(t, job, autoScaleKnobs, "--max-nodes-here", "4", "--rdzv-id", job, "--nnodes", "1:4", "--nproc-per-node", "1",
		"--max-restarts", "3", "--checkpoint-dir", filepath.Join(dir, "flash"), "--checkpoint-keep", "2",
		filepath.Join(repoRoot, "test", "e2e", "testdata", "autoscale_train.py"),
		"--curve", curve, "--saturate-at", "2", "--stop-file", stop, "--log", dir)
	start := time.Now()
	var addr string
	waitFor(t, time.Minute, "rover submit to say where its master is", func() bool {
		m := masterAtRE.FindStringSubmatch(s.stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	token, err := os.ReadFile(filepath.Join(s.dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	mc := client.New(hc, addr, strings.TrimSpace(string(token)))
	var j *roverv1.GetJobResponse
	var settled time.Duration
	var said string
	waitFor(t, 6*time.Minute, fmt.Sprintf("the job to settle at %d nodes, holding for %s", settle, hold), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := mc.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
		if err != nil {
			return false
		}
		j = r.Msg
		a := j.GetAutoScale()
		if a == nil {
			t.Fatalf("GetJob has no auto_scale under --auto-scale: %v", j)
		}
		if k := a.GetLatest().GetAction() + " " + a.GetLatest().GetReason(); k != said { // the trail of decisions, for a failure
			said = k
			t.Logf("%s: %s", time.Since(start).Round(time.Second), a.GetLatest().GetMessage())
		}
		if settled == 0 && a.GetTargetNodes() == int32(settle) && int(a.GetChanges()) == len(changes) {
			settled = time.Since(start)
		}
		return !j.GetRoundOpen() && j.GetWorldSize() == int32(settle) && int(a.GetChanges()) == len(changes) &&
			a.GetLatest().GetAction() == "hold" && a.GetLatest().GetReason() == hold
	})
	a := j.GetAutoScale()
	if a.GetUnit() != "samples/s" {
		t.Errorf("throughput in %q, want samples/s: the script reports its steps' samples", a.GetUnit())
	}
	for _, sz := range a.GetSizes() {
		t.Logf("%d nodes: %.1f %s (±%.1f, %d samples, trusted %v)", sz.GetNodes(), sz.GetThroughput(), a.GetUnit(), sz.GetStdErr(), sz.GetSamples(), sz.GetTrusted())
	}
	t.Logf("settled at %d nodes %s after the start; now: %s", settle, settled.Round(time.Second), a.GetLatest().GetMessage())
	status, err := exec.Command(roverBin, "status", "--master", addr, "--token-file", filepath.Join(s.dir, "token")).CombinedOutput()
	out := string(status)
	if err != nil || !strings.Contains(out, fmt.Sprintf("auto-scaling: target %d nodes, %d changes", settle, len(changes))) ||
		!strings.Contains(out, "now: hold ("+hold+")") {
		t.Errorf("rover status does not show the policy's state:\n%s", out)
	}

	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0", code)
	}
	if got := autoScaleChanges(t, filepath.Join(s.dir, "master", eventlog.FileName)); !slices.Equal(got, changes) {
		t.Errorf("the event log's auto-scaling changes are %v, want %v", got, changes)
	}
	logs := readTrainLogs(t, dir)
	// The job stops at the end of an epoch: every epoch it began is whole.
	checkExactlyOnce(t, logs, 480, epochsTrained(logs), 4*4)
}

// autoScaleChanges lists the auto-scaling changes in an event log, as
// "grow 1>2".
func autoScaleChanges(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	from := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e eventlog.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e.Kind != eventlog.ScaleDecision || !strings.HasPrefix(e.Reason, "auto-scale ") {
			continue
		}
		action, _, _ := strings.Cut(strings.TrimPrefix(e.Reason, "auto-scale "), ":")
		if m := regexp.MustCompile(`from (\d+) to`).FindStringSubmatch(e.Message); m != nil {
			fmt.Sscan(m[1], &from)
		}
		out = append(out, fmt.Sprintf("%s %d>%d", action, from, e.Nodes))
	}
	return out
}
