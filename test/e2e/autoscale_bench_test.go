package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/eventlog"
)

// BenchmarkAutoScale runs the same job (test/e2e/testdata/autoscale_train.py:
// real DDP with gloo, ElasticSampler, flash checkpoints; 10 epochs of 480
// samples, a batch of 4 per rank, step time modelled by a sleep by world
// size) under `rover submit` three ways: on a fixed MIN of 1 node, on a
// fixed MAX of 4, and under --auto-scale within 1:4 (the knobs of
// TestAutoScaleSubmit), for a linear curve and one that saturates at 2
// nodes (make bench-autoscale; docs/benchmarks.md). It reports, from the
// job's event log:
//
//	wall          the first world formed, to the job's end
//	samples/s     the samples trained over wall
//	node-seconds  nodes in the world times the time each world lasted
//	settled       (auto) the first world, to the world formed after the
//	              policy's last change
func BenchmarkAutoScale(b *testing.B) {
	for _, curve := range []string{"linear", "saturating"} {
		for _, mode := range []string{"min", "max", "auto"} {
			b.Run(curve+"/"+mode, func(b *testing.B) {
				var r autoScaleRun
				for i := range b.N {
					r = autoScaleBenchOnce(b, curve, mode, i)
					b.Logf("run %d: %s", i, r)
				}
				b.ReportMetric(r.wall.Seconds(), "wall-s")
				b.ReportMetric(r.throughput, "samples/s")
				b.ReportMetric(r.nodeSeconds, "node-s")
				if mode == "auto" {
					b.ReportMetric(r.settled.Seconds(), "settled-s")
				}
			})
		}
	}
}

type autoScaleRun struct {
	wall, settled time.Duration
	throughput    float64
	nodeSeconds   float64
	sizes         []int
}

func (r autoScaleRun) String() string {
	return fmt.Sprintf("wall %s, %.1f samples/s, %.0f node-seconds, worlds %v, settled after %s",
		r.wall.Round(100*time.Millisecond), r.throughput, r.nodeSeconds, r.sizes, r.settled.Round(100*time.Millisecond))
}

func autoScaleBenchOnce(b *testing.B, curve, mode string, i int) autoScaleRun {
	const size, epochs = 480, 10
	dir := b.TempDir()
	job := uniqueJob(fmt.Sprintf("asb-%s-%s-%d", curve[:3], mode, i))
	args := []string{"--max-nodes-here", "4"}
	nnodes := map[string]string{"min": "1", "max": "4", "auto": "1:4"}[mode]
	if mode == "auto" {
		args = append(args, autoScaleKnobs)
	}
	args = append(args, "--rdzv-id", job, "--nnodes", nnodes, "--nproc-per-node", "1", "--max-restarts", "3",
		"--checkpoint-dir", filepath.Join(dir, "flash"), "--checkpoint-keep", "2",
		filepath.Join(repoRoot, "test", "e2e", "testdata", "autoscale_train.py"),
		"--curve", curve, "--saturate-at", "2", "--size", fmt.Sprint(size), "--epochs", fmt.Sprint(epochs),
		"--stop-file", filepath.Join(dir, "never"), "--log", dir)
	s := submit(b, job, args...)
	if code := s.wait(b, 15*time.Minute); code != 0 {
		b.Fatalf("rover submit exited %d", code)
	}
	return autoScaleFigures(b, filepath.Join(s.dir, "master", eventlog.FileName), epochs*size) // 480 divides by every global batch (4 to 16): no tail is dropped
}

// autoScaleFigures reads a finished job's event log; samples is what the
// job trained.
func autoScaleFigures(b *testing.B, path string, samples int) autoScaleRun {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var r autoScaleRun
	var first, prev, end, lastChange, settledAt time.Time
	prevNodes := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e eventlog.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		switch {
		case e.Kind == eventlog.RendezvousCompleted:
			if first.IsZero() {
				first = e.Time
			}
			if !prev.IsZero() {
				r.nodeSeconds += float64(prevNodes) * e.Time.Sub(prev).Seconds()
			}
			prev, prevNodes = e.Time, e.Nodes
			r.sizes = append(r.sizes, e.Nodes)
			if !lastChange.IsZero() && settledAt.Before(lastChange) {
				settledAt = e.Time
			}
		case e.Kind == eventlog.ScaleDecision && strings.HasPrefix(e.Reason, "auto-scale "):
			lastChange = e.Time
		case e.Kind == eventlog.JobSucceeded || e.Kind == eventlog.JobFailed:
			end = e.Time
		}
	}
	if first.IsZero() || end.IsZero() {
		b.Fatalf("%s: no world formed, or no end", path)
	}
	r.nodeSeconds += float64(prevNodes) * end.Sub(prev).Seconds()
	r.wall = end.Sub(first)
	r.throughput = float64(samples) / r.wall.Seconds()
	if !settledAt.IsZero() {
		r.settled = settledAt.Sub(first)
	}
	return r
}
