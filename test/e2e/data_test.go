package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// trainedLog is what examples/elastic_data/ddp_sampler.py logs per round and rank.
type trainedLog struct {
	round, rank, start, world int
	globalBatch               int // the sampler's global batch (world * per-rank batch, or --global-batch-size)
	steps                     []trainedStep
}

type trainedStep struct {
	Step    int     `json:"step"`
	Epoch   int     `json:"epoch"`
	Indices []int64 `json:"indices"`
}

func readTrainLogs(t testing.TB, dir string) []trainedLog {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "train-round*-rank*.jsonl"))
	name := regexp.MustCompile(`train-round(\d+)-rank(\d+)\.jsonl$`)
	var out []trainedLog
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		var l trainedLog
		m := name.FindStringSubmatch(f)
		l.round, _ = strconv.Atoi(m[1])
		l.rank, _ = strconv.Atoi(m[2])
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for first := true; sc.Scan(); first = false {
			if first {
				var h struct {
					Start       int `json:"start_step"`
					World       int `json:"world"`
					GlobalBatch int `json:"global_batch"`
				}
				if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				l.start, l.world, l.globalBatch = h.Start, h.World, h.GlobalBatch
				continue
			}
			var s trainedStep
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				continue // a line cut short by a kill
			}
			l.steps = append(l.steps, s)
		}
		fh.Close()
		out = append(out, l)
	}
	return out
}

func countSteps(logs []trainedLog) int {
	n := 0
	for _, l := range logs {
		n += len(l.steps)
	}
	return n
}

// TestElasticSamplerExactlyOnce trains with ElasticSampler and flash
// checkpoints on two nodes of two workers, kills one node mid-epoch (the
// world shrinks to one node, which resumes from memory) and later starts a
// new node (the world grows back and resumes from storage). Over the steps
// that survived (those not rolled back by a later restore), every sample of
// every epoch is trained exactly once, except a tail shorter than one global
// batch that the sampler drops.
func TestElasticSamplerExactlyOnce(t *testing.T) {
	c := newCluster(t, "elastic-data")
	dir := t.TempDir()
	const size, batch, epochs = 600, 4, 2
	args := []string{"--nnodes", "1:2", "--nproc-per-node", "2", "--max-restarts", "5", "--rdzv-conf", rdzvConf,
		"--checkpoint-dir", filepath.Join(dir, "flash"), "--checkpoint-keep", "2",
		filepath.Join(repoRoot, "examples", "elastic_data", "ddp_sampler.py"),
		"--size", strconv.Itoa(size), "--batch-size", strconv.Itoa(batch), "--epochs", strconv.Itoa(epochs),
		"--persist-every", "5", "--step-sleep", "0.05", "--log", dir}
	shrinkAndGrow(t, c, dir, args)

	logs := readTrainLogs(t, dir)
	starts := map[int]int{} // round -> the step it resumed at
	worlds := map[int]bool{}
	for _, l := range logs {
		if s, ok := starts[l.round]; ok && s != l.start {
			t.Errorf("round %d: ranks resumed at steps %d and %d; every rank must resume at the same one", l.round, s, l.start)
		}
		starts[l.round] = l.start
		worlds[l.world] = true
	}
	if !worlds[2] || !worlds[4] {
		t.Fatalf("worlds seen %v, want the world to shrink to 2 and grow back to 4", worlds)
	}
	checkExactlyOnce(t, logs, size, epochs, 4*batch)
}

// checkExactlyOnce asserts that every sample of every epoch was trained
// exactly once over the logged steps that survived (a step is rolled back
// when a later round resumed from an earlier step), but a tail shorter than
// a global batch that the sampler drops.
func checkExactlyOnce(t *testing.T, logs []trainedLog, size, epochs, globalBatch int) {
	t.Helper()
	starts := map[int]int{}
	for _, l := range logs {
		starts[l.round] = l.start
	}
	survives := func(round, step int) bool {
		for r, s := range starts {
			if r > round && s < step {
				return false
			}
		}
		return true
	}
	count := map[[2]int64]int{}
	for _, l := range logs {
		for _, s := range l.steps {
			if !survives(l.round, s.Step) {
				continue
			}
			for _, i := range s.Indices {
				count[[2]int64{int64(s.Epoch), i}]++
			}
		}
	}
	for e := int64(0); e < int64(epochs); e++ {
		missing := 0
		for i := int64(0); i < int64(size); i++ {
			switch n := count[[2]int64{e, i}]; {
			case n > 1:
				t.Errorf("epoch %d: sample %d trained %d times", e, i, n)
			case n == 0:
				missing++
			}
		}
		if missing >= globalBatch {
			t.Errorf("epoch %d: %d samples never trained; only a tail shorter than a global batch (%d) may be dropped", e, missing, globalBatch)
		}
		t.Logf("epoch %d: every sample trained once but a dropped tail of %d", e, missing)
	}
}

// shrinkAndGrow runs the job of args on two nodes of two workers that log
// to dir, kills one node once 20 steps were logged (the world shrinks to
// one node, which trains on for 25 steps), then starts a new node (the
// world grows back), and waits for the job to succeed.
func shrinkAndGrow(t *testing.T, c *cluster, dir string, args []string) {
	t.Helper()
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitSteps := func(n int, up ...*process) {
		t.Helper()
		waitFor(t, jobTimeout, fmt.Sprintf("%d steps logged", n), func() bool {
			if countSteps(readTrainLogs(t, dir)) >= n {
				return true
			}
			for _, a := range up {
				if a.exited() {
					t.Fatalf("%s exited before %d steps were logged:\n%s", a.name, n, a.out)
				}
			}
			return false
		})
	}
	waitSteps(4*20, a0, a1) // 20 steps of 4 ranks, in epoch 0
	a1.kill(t)
	waitSteps(4*20+2*25, a0) // the one-node world trains on
	a2 := c.agent("node2", args...)
	for _, a := range []*process{a0, a2} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
}

// epochsTrained is how many epochs the logged steps reached into.
func epochsTrained(logs []trainedLog) int {
	n := 0
	for _, l := range logs {
		for _, st := range l.steps {
			n = max(n, st.Epoch+1)
		}
	}
	return n
}
