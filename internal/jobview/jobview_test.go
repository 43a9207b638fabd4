package jobview

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/testsrc"
)

const (
	running   = roverv1.JobState_JOB_STATE_RUNNING
	succeeded = roverv1.JobState_JOB_STATE_SUCCEEDED
	failed    = roverv1.JobState_JOB_STATE_FAILED
)

// handJob is a job on agents started by hand: no platform, no managed
// nodes, node1 lost.
func handJob() *roverv1.GetJobResponse {
	return &roverv1.GetJobResponse{
		RunId: "train", JobState: running, Round: 2, WorldSize: 4, RestartCount: 1, MaxRestarts: 3,
		CheckpointStep: -1,
		Nodes: []*roverv1.NodeStatus{
			{NodeId: "node0", NodeRank: 0, Addr: "10.0.0.1:29500", GroupRank: 0},
			{NodeId: "node1", NodeRank: 1, Addr: "10.0.0.2:29500", GroupRank: -1, Lost: true, LostReason: "no heartbeat\nfor 30s"},
		},
	}
}

// managedJob is a job whose master runs the nodes on the local platform:
// worker rank 1 was relaunched once, on host-b; the job failed after it.
func managedJob() *roverv1.GetJobResponse {
	return &roverv1.GetJobResponse{
		RunId: "train", JobState: failed, Reason: "node relaunch budget spent", Round: 3, WorldSize: 2,
		RestartCount: 2, MaxRestarts: 3, Relaunches: 1, Platform: "local", CheckpointStep: 40,
		RelaunchCauses: map[string]int32{"oom": 1},
		Nodes: []*roverv1.NodeStatus{
			{NodeId: "worker-0-0", NodeRank: 0, Addr: "127.0.0.1:1", GroupRank: 0, Host: "host-a"},
			{NodeId: "worker-1-1", NodeRank: 1, Addr: "127.0.0.1:2", GroupRank: 1, RelaunchCount: 1, Host: "host-b"},
		},
		ManagedNodes: []*roverv1.ManagedNode{
			{Group: "worker", Rank: 0, NodeId: "worker-0-0", State: "Running", Budget: 2, Host: "host-a", Critical: true},
			{Group: "worker", Rank: 1, NodeId: "worker-1-1", State: "Failed", Relaunches: 1, Budget: 2, Host: "host-b",
				LastExit: "exit code 137 (out of memory)"},
		},
		Failures: []*roverv1.WorkerFailure{
			{Round: 1, NodeId: "worker-1-0", Rank: 1, ExitCode: -1, Signal: 9, Cause: "out_of_memory", Action: "relaunch_node",
				Diagnosis: "killed by the kernel\nfor memory", Traceback: "Traceback (most recent call last):\n  File \"old.py\"\nMemoryError\n"},
			{Round: 2, NodeId: "worker-1-1", Rank: 1, ExitCode: 1, Cause: "user_error", Action: "fail_job",
				Message: "ValueError: bad batch", Traceback: "Traceback (most recent call last):\n  File \"train.py\", line 7\nValueError: bad batch\n"},
			{Round: 3, NodeId: "worker-0-0", Rank: 0, ExitCode: 143, Message: "stopped"},
		},
	}
}

// row matches a table row: its cells, in order, separated by the
// tabwriter's padding.
func row(cells ...string) *regexp.Regexp {
	q := make([]string, len(cells))
	for i, c := range cells {
		q[i] = regexp.QuoteMeta(c)
	}
	return regexp.MustCompile(`(?m)^` + strings.Join(q, `\s{2,}`) + `\s*$`)
}

// check holds what a rendering must and must not contain.
type check struct {
	has   []string
	lacks []string
	rows  []*regexp.Regexp
}

func (c check) run(t *testing.T, out string) {
	t.Helper()
	for _, s := range c.has {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	for _, s := range c.lacks {
		if strings.Contains(out, s) {
			t.Errorf("output has %q:\n%s", s, out)
		}
	}
	for _, r := range c.rows {
		if !r.MatchString(out) {
			t.Errorf("output has no row matching %s:\n%s", r, out)
		}
	}
}

func TestStatus(t *testing.T) {
	open := handJob()
	open.RoundOpen = true
	tests := []struct {
		name string
		job  *roverv1.GetJobResponse
		want check
	}{{
		name: "agents by hand",
		job:  handJob(),
		want: check{
			has: []string{"job train: running\n", "round 2 (training), world size 4, restarts 1 of 3\n"},
			rows: []*regexp.Regexp{
				row("NODE", "RANK", "GROUP RANK", "ADDR", "RELAUNCHES", "HOST", "STATE"),
				row("node0", "0", "0", "10.0.0.1:29500", "0", "-", "alive"),
				row("node1", "1", "-", "10.0.0.2:29500", "0", "-", "lost: no heartbeat for 30s"),
			},
			lacks: []string{"GROUP  RANK  NODE", "nodes on", "failures:", "relaunches", "checkpoint", "auto-scaling"},
		},
	}, {
		name: "collecting nodes",
		job:  open,
		want: check{has: []string{"round 2 (collecting nodes), world size 4"}},
	}, {
		name: "managed nodes",
		job:  managedJob(),
		want: check{
			has: []string{
				"job train: failed (node relaunch budget spent)\n",
				"round 3 (training), world size 2, restarts 2 of 3, relaunches 1 (oom 1), checkpoint step 40\n",
				"\nnodes on local:\n",
				"\nfailures:\n",
			},
			rows: []*regexp.Regexp{
				row("worker-1-1", "1", "1", "127.0.0.1:2", "1", "host-b", "alive"),
				row("GROUP", "RANK", "NODE", "STATE", "RELAUNCHES", "HOST", "LAST EXIT"),
				row("worker", "0", "worker-0-0", "Running", "0/2 critical", "host-a", "-"),
				row("worker", "1", "worker-1-1", "Failed", "1/2", "host-b", "exit code 137 (out of memory)"),
				row("ROUND", "NODE", "RANK", "EXIT", "CAUSE", "ACTION", "WHY"),
				row("1", "worker-1-0", "1", "signal 9", "out_of_memory", "relaunch_node", "killed by the kernel for memory"),
				row("2", "worker-1-1", "1", "1", "user_error", "fail_job", "ValueError: bad batch"),
				row("3", "worker-0-0", "0", "143", "-", "-", "stopped"),
			},
			// Status leaves tracebacks to Summary.
			lacks: []string{"Traceback"},
		},
	}, {
		name: "auto-scaling",
		job: &roverv1.GetJobResponse{RunId: "j", JobState: running, Platform: "local", CheckpointStep: -1, AutoScale: &roverv1.AutoScaleStatus{
			TargetNodes: 3, Changes: 2, Capacity: 4, Unit: "samples/s",
			LastChange: &roverv1.AutoScaleDecision{Action: "grow", Reason: "predicted_gain", Message: "grow from 2 to 3 nodes: each added node is predicted to add 0.85"},
			Latest:     &roverv1.AutoScaleDecision{Action: "hold", Reason: "measuring", Message: "3 nodes: 4 of 25 samples"},
			Sizes: []*roverv1.SizeThroughput{{Nodes: 2, Throughput: 190.25, StdErr: 2.5, Samples: 25, Trusted: true},
				{Nodes: 3, Throughput: 271, StdErr: 9, Samples: 4}},
		}},
		want: check{
			has: []string{"\nauto-scaling: target 3 nodes, 2 changes, capacity 4 nodes\n",
				"last change: grow (predicted_gain): grow from 2 to 3 nodes: each added node is predicted to add 0.85\n",
				"now: hold (measuring): 3 nodes: 4 of 25 samples\n"},
			rows: []*regexp.Regexp{row("NODES", "THROUGHPUT (samples/s)", "STD ERR", "SAMPLES", "TRUSTED"),
				row("2", "190.2", "2.5", "25", "true"), row("3", "271", "9", "4", "false")},
		},
	}, {
		name: "right-sizing",
		job: &roverv1.GetJobResponse{RunId: "j", JobState: running, Platform: "kubernetes", CheckpointStep: -1, ManagedNodes: []*roverv1.ManagedNode{
			{Group: "worker", Rank: 0, NodeId: "j-worker-0-1", State: "Running", RightSize: &roverv1.RankRightSize{
				PeakBytes: 3 << 30, CpuCores: 1.95, SampledMilliCpu: 2000, StepSlowdown: 2, NextMilliCpu: 3000, NextMemoryBytes: 3840 << 20,
				Why: "right-sized: memory 8589934592 -> 4026531840 bytes (peak 3221225472), CPU 2000m -> 3000m (used 1.95 cores of 2000m while steps slowed 2.0x)"}},
			{Group: "worker", Rank: 1, NodeId: "j-worker-1-0", State: "Running", RightSize: &roverv1.RankRightSize{
				PeakBytes: 6 << 30, CpuCores: 1.9, SampledMilliCpu: 2000, NextMilliCpu: 2000, NextMemoryBytes: 8 << 30}},
			{Group: "worker", Rank: 2, NodeId: "j-worker-2-0", State: "Pending"},
		}},
		want: check{
			has: []string{"\nright-sizing (what the workers used; what the next node asks for):\n"},
			rows: []*regexp.Regexp{row("GROUP", "RANK", "PEAK MEMORY", "CPU USED", "STEPS", "NEXT CPU", "NEXT MEMORY", "WHY"),
				row("worker", "0", "3.00GiB", "1.95 of 2000m", "2.00x", "3000m", "3.75GiB",
					"memory 8589934592 -> 4026531840 bytes (peak 3221225472), CPU 2000m -> 3000m (used 1.95 cores of 2000m while steps slowed 2.0x)"),
				row("worker", "1", "6.00GiB", "1.90 of 2000m", "-", "2000m", "8.00GiB", "as configured")},
		},
	}, {
		name: "platform with no nodes yet",
		job:  &roverv1.GetJobResponse{RunId: "j", JobState: running, Platform: "kubernetes", CheckpointStep: 0},
		want: check{
			has:   []string{"relaunches 0, checkpoint step 0\n", "nodes on kubernetes:\n"},
			rows:  []*regexp.Regexp{row("GROUP", "RANK", "NODE", "STATE", "RELAUNCHES", "HOST", "LAST EXIT")},
			lacks: []string{"right-sizing"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Status(&b, tt.job); err != nil {
				t.Fatalf("Status: %v", err)
			}
			tt.want.run(t, b.String())
		})
	}
}

// TestRightSizeOnlyRanksWithUsage: the right-sizing table has a row per
// rank with a usage record, and is left out when none has one.
func TestRightSizeOnlyRanksWithUsage(t *testing.T) {
	ms := []*roverv1.ManagedNode{{Group: "worker", Rank: 0, RightSize: &roverv1.RankRightSize{PeakBytes: 1 << 20}}, {Group: "worker", Rank: 1}}
	var b bytes.Buffer
	writeRightSize(&b, ms)
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], "worker  0") {
		t.Errorf("right-sizing table:\n%s\nwant a title, a header and rank 0's row", b.String())
	}
	b.Reset()
	writeRightSize(&b, ms[1:])
	if b.Len() != 0 {
		t.Errorf("right-sizing without usage: %q, want nothing", b.String())
	}
}

func TestProgress(t *testing.T) {
	open := handJob()
	open.RoundOpen = true
	run := managedJob()
	run.JobState, run.Reason = running, ""
	run.ManagedNodes[1].State = "Running"
	pending := managedJob()
	pending.JobState = running
	pending.ManagedNodes[1].State = "Pending"
	pending.CheckpointStep = -1
	tests := []struct {
		name string
		job  *roverv1.GetJobResponse
		want string
	}{
		{"managed, all running", run, "job train: round 3 training, 2 of 2 nodes, restarts 2 of 3, relaunches 1, checkpoint step 40"},
		{"managed, one pending, no checkpoint", pending, "job train: round 3 training, 1 of 2 nodes, restarts 2 of 3, relaunches 1"},
		{"by hand, one lost", handJob(), "job train: round 2 training, 1 of 2 nodes, restarts 1 of 3, relaunches 0"},
		{"round open", open, "job train: round 2 collecting nodes, 1 of 2 nodes, restarts 1 of 3, relaunches 0"},
		{"ended", managedJob(), "job train: round 3 failed, 1 of 2 nodes, restarts 2 of 3, relaunches 1, checkpoint step 40"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Progress(tt.job)
			if got != tt.want {
				t.Errorf("Progress:\n got %q\nwant %q", got, tt.want)
			}
			if strings.Contains(got, "\n") {
				t.Errorf("Progress %q is more than one line", got)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	ok := managedJob()
	ok.JobState, ok.Reason, ok.Failures = succeeded, "", nil
	ok.ManagedNodes[1].State = "Succeeded"
	none := managedJob()
	none.CheckpointStep = -1
	none.Failures = none.Failures[2:] // no traceback anywhere
	tests := []struct {
		name string
		job  *roverv1.GetJobResponse
		took time.Duration
		want check
	}{{
		name: "failed",
		job:  managedJob(),
		took: 83*time.Second + 400*time.Millisecond,
		want: check{
			has: []string{
				"job train failed after 1m23s: node relaunch budget spent\n",
				"rounds 3, restarts 2 of 3, node relaunches 1 (oom 1), last checkpoint step 40\n",
				"\nnodes on local:\n",
				"\nfailures:\n",
				// The root failure is the last one with a traceback: round 2's.
				"\nroot failure: round 2, node worker-1-1, rank 1:\n" +
					"    Traceback (most recent call last):\n" +
					"      File \"train.py\", line 7\n" +
					"    ValueError: bad batch\n",
			},
			rows: []*regexp.Regexp{
				row("worker", "0", "worker-0-0", "Running", "0/2 critical", "host-a", "-"),
				row("worker", "1", "worker-1-1", "Failed", "1/2", "host-b", "exit code 137 (out of memory)"),
				row("1", "worker-1-0", "1", "signal 9", "out_of_memory", "relaunch_node", "killed by the kernel for memory"),
				row("2", "worker-1-1", "1", "1", "user_error", "fail_job", "ValueError: bad batch"),
			},
			lacks: []string{"old.py", "NODE  RANK  GROUP RANK"},
		},
	}, {
		name: "succeeded",
		job:  ok,
		took: 1500 * time.Millisecond,
		want: check{
			has:   []string{"job train succeeded after 2s\n", "node relaunches 1 (oom 1), last checkpoint step 40\n"},
			rows:  []*regexp.Regexp{row("worker", "1", "worker-1-1", "Succeeded", "1/2", "host-b", "exit code 137 (out of memory)")},
			lacks: []string{"failures:", "root failure", "Traceback"},
		},
	}, {
		name: "failed with no traceback or checkpoint",
		job:  none,
		took: 250 * time.Millisecond,
		want: check{
			has:   []string{"job train failed after 250ms: ", "last checkpoint none\n", "failures:"},
			lacks: []string{"root failure", "checkpoint step"},
		},
	}, {
		name: "no managed nodes",
		job:  &roverv1.GetJobResponse{RunId: "j", JobState: succeeded, Round: 1, CheckpointStep: -1},
		took: time.Minute,
		want: check{
			has:   []string{"job j succeeded after 1m0s\nrounds 1, restarts 0 of 0, node relaunches 0, last checkpoint none\n"},
			lacks: []string{"GROUP", "nodes"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Summary(&b, tt.job, tt.took); err != nil {
				t.Fatalf("Summary: %v", err)
			}
			tt.want.run(t, b.String())
		})
	}
}

// errWriter fails every write.
type errWriter struct{}

var errFull = errors.New("disk full")

func (errWriter) Write([]byte) (int, error) { return 0, errFull }

func TestWriteErrors(t *testing.T) {
	if err := Status(errWriter{}, managedJob()); !errors.Is(err, errFull) {
		t.Errorf("Status to a failing writer: %v, want %v", err, errFull)
	}
	if err := Summary(errWriter{}, managedJob(), time.Second); !errors.Is(err, errFull) {
		t.Errorf("Summary to a failing writer: %v, want %v", err, errFull)
	}
}

// TestNilJob renders a job the master has said nothing of without
// panicking.
func TestNilJob(t *testing.T) {
	var b bytes.Buffer
	if err := Status(&b, nil); err != nil {
		t.Fatal(err)
	}
	if err := Summary(&b, nil, 0); err != nil {
		t.Fatal(err)
	}
	if got := Progress(nil); !strings.HasPrefix(got, "job : round 0 ") {
		t.Errorf("Progress(nil) = %q", got)
	}
}

// TestDependencies keeps jobview a formatter: it renders the API's messages
// and reaches no master, client or platform.
func TestDependencies(t *testing.T) {
	for _, pkg := range testsrc.Deps(t, false) {
		if strings.HasPrefix(pkg, "github.com/roverml/rover/internal/") && pkg != "github.com/roverml/rover/internal/jobview" {
			t.Errorf("package jobview depends on %s: it only formats roverv1 messages", pkg)
		}
	}
}

// TestProgressShown checks that the status, the one-line progress and the
// summary name a straggler and a hang.
func TestProgressShown(t *testing.T) {
	j := &roverv1.GetJobResponse{RunId: "train", JobState: roverv1.JobState_JOB_STATE_RUNNING, Round: 1, CheckpointStep: -1,
		Progress: &roverv1.JobProgress{Step: 120, Stragglers: []string{"node1"}, StragglerReason: "node1 is busy 0.055s per step, 9.2x the others' median 0.006s",
			Hung: true, HangReason: "no worker made progress for 5s", Hangs: 1,
			Nodes: []*roverv1.NodeStepTime{{NodeId: "node0", Step: 120, StepSeconds: 0.06, BusySeconds: 0.006, Samples: 10},
				{NodeId: "node1", NodeRank: 1, Step: 120, StepSeconds: 0.06, BusySeconds: 0.055, Samples: 10, Straggler: true}}}}
	var b bytes.Buffer
	if err := Status(&b, j); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"progress: step 120, stragglers: node1, hangs 1", "straggler: node1 is busy 0.055s per step",
		"HUNG: no worker made progress for 5s", "node1  1     120   0.060   0.055        10       straggler"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if p := Progress(j); !strings.HasSuffix(p, ", stragglers node1, HUNG") {
		t.Errorf("progress line %q does not name the straggler and the hang", p)
	}
	b.Reset()
	if err := Summary(&b, j, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "stragglers node1, HUNG\nstraggler: node1 is busy") {
		t.Errorf("summary does not name the straggler:\n%s", b.String())
	}
}

// TestCollectivesShown checks that the status shows the nodes' compute and
// wait per step where workers time their collectives, and where each rank
// stood in them while the job hangs.
func TestCollectivesShown(t *testing.T) {
	coll := func(seq int64, done bool) *roverv1.Collective {
		return &roverv1.Collective{Op: "all_reduce", Bytes: 8640, Group: "world", Seq: seq, Done: done}
	}
	j := &roverv1.GetJobResponse{RunId: "train", JobState: roverv1.JobState_JOB_STATE_RUNNING, Round: 1, CheckpointStep: -1,
		Progress: &roverv1.JobProgress{Step: 14, Hung: true, HangReason: "no worker made progress for 10s; collectives: rank 0 waits in all_reduce #15", Hangs: 1,
			HangCollectives: []*roverv1.RankCollective{{Rank: 0, NodeId: "node0", Collective: coll(15, false)}, {Rank: 1, NodeId: "node1", Collective: coll(14, true)}},
			Nodes: []*roverv1.NodeStepTime{{NodeId: "node0", Step: 14, StepSeconds: 0.85, BusySeconds: 0.08, ComputeSeconds: 0.08, WaitSeconds: 0.77, Samples: 10},
				{NodeId: "node1", NodeRank: 1, Step: 14, StepSeconds: 0.85, BusySeconds: 0.08, ComputeSeconds: 0.8, WaitSeconds: 0.05, Samples: 10, Straggler: true}}}}
	var b bytes.Buffer
	if err := Status(&b, j); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"COMPUTE S/STEP  WAIT S/STEP", "0.850   0.080        0.800           0.050        10       straggler",
		"0     node0  all_reduce  15   world  8640   in it", "1     node1  all_reduce  14   world  8640   completed it"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "TFLOPS") || strings.Contains(b.String(), "DDP STEP") {
		t.Errorf("status shows matmul throughput without GPU timing, or DDP steps none reported:\n%s", b.String())
	}
	// Stock DDP with untimed buckets: the DDP step each rank is in, and a
	// rank that issued no timed collective.
	hc := j.Progress.HangCollectives
	j.Progress.HangCollectives = []*roverv1.RankCollective{
		{Rank: 0, NodeId: "node0", Collective: coll(1, true), DdpStep: &roverv1.DDPStep{Group: "world", Forwards: 15}},
		{Rank: 1, NodeId: "node1", DdpStep: &roverv1.DDPStep{Group: "world", Forwards: 14}}}
	b.Reset()
	if err := Status(&b, j); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"STATE         DDP STEP  BUCKETS", "0     node0  all_reduce  1    world  8640   completed it  15        untimed",
		"1     node1  -           -    -      -      -             14        untimed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	j.Progress.HangCollectives = hc
	j.Progress.Nodes[0].MatmulTflops, j.Progress.Nodes[1].MatmulTflops = 61.5, 58.25
	b.Reset()
	if err := Status(&b, j); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"WAIT S/STEP  MATMUL TFLOPS  SAMPLES", "0.800           0.050        58.25          10       straggler"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}
