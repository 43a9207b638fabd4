package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/ckpt"
)

// The example's data and checkpoint settings in TestTorchParameterServerExample.
const (
	torchPSSamples      = 600 // an epoch
	torchPSBatch        = 10  // samples a batch: one step of every PS
	torchPSBatches      = torchPSSamples / torchPSBatch
	torchPSPersistEvery = 25
	torchPSKeep         = 3
)

// TestTorchParameterServerExample runs examples/parameter_server under
// rover submit: 2 PS, 3 workers and a chief, in torch.distributed.rpc,
// each reading its role from TF_CONFIG. The workers lease the shards of a
// 600-sample training set through rover.data.ShardClient (from the master:
// the roles have no agent) and push their gradients to the PS, which
// checkpoint their slices, steps and applied batches with
// rover.checkpoint.Checkpointer into a directory each. Three runs share
// the checkpoint directory:
//
//  1. One epoch from scratch: the held-out loss falls tenfold; every
//     sample is trained exactly once on each PS; each PS persisted steps
//     25, 50 and, told by the chief at the end, 60, in Rover's layout
//     (manifest, latest marker, safetensors), which package ckpt reads and
//     validates; the file holds the slice the PS logged.
//  2. Two epochs: each PS restores step 60 with the saved slice (the
//     chief's starting loss is the first run's final one), the workers
//     skip every batch of epoch 0 and train every sample of epoch 1 once.
//  3. Two epochs again, the newest step (120) of each PS deleted, as if the
//     job had been lost after step 100: each PS restores step 100, part-way
//     through epoch 1, and the workers train exactly the batches that step
//     had not applied: with those the file lists, every batch once.
//
// No process is killed: torch 1.13's rpc world is fixed when it starts and
// cannot survive the loss of a process (the others' rpc calls fail), so a
// fault would end this job rather than test it. The faults of a PS job
// (a worker's leases going to the others, a PS relaunched and restored)
// are tested with the stdlib program testdata/ps_roles.py, which
// reconnects (paramserver_test.go, psdata_test.go).
func TestTorchParameterServerExample(t *testing.T) {
	dir := t.TempDir()
	run1 := runTorchPS(t, dir, 1)
	before, after := run1.loss(t)
	if !(after < before/10) {
		t.Errorf("run 1: held-out loss %v -> %v: the job did not train", before, after)
	}
	run1.checkSteps(t, 60, 60)
	if n := len(run1.batchesOf(false, -1)); n != 0 {
		t.Errorf("run 1 skipped %d batches, want none (no PS had applied any)", n)
	}
	saved := make([]psCheckpoint, 2)
	for j := range 2 {
		b := run1.trainedOn(j)
		checkOnce(t, fmt.Sprintf("run 1, PS %d", j), b, 0, torchPSSamples)
		if len(b) != torchPSBatches {
			t.Errorf("run 1: PS %d was pushed %d batches, want %d", j, len(b), torchPSBatches)
		}
		for _, step := range []int{25, 50, 60} {
			if !strings.Contains(run1.out, fmt.Sprintf("ps %d persisted step %d to ", j, step)) {
				t.Errorf("run 1: PS %d did not log persisting step %d", j, step)
			}
		}
		saved[j] = readPSCheckpoint(t, dir, j)
		if saved[j].step != 60 {
			t.Fatalf("PS %d's latest checkpoint is step %d, want 60", j, saved[j].step)
		}
		if want := fmt.Sprintf("ps %d persisted step 60 to %s: w sha256 %s", j, saved[j].dir, saved[j].digest); !strings.Contains(run1.out, want) {
			t.Errorf("PS %d's step 60 file does not hold the slice it logged (%q)", j, want)
		}
		if !slices.Equal(saved[j].applied, batchIDs(b)) {
			t.Errorf("PS %d's step 60 file lists batches %v applied, it trained %v", j, saved[j].applied, batchIDs(b))
		}
	}

	run2 := runTorchPS(t, dir, 2)
	start2, after2 := run2.loss(t)
	if start2 != after {
		t.Errorf("run 2 started at held-out loss %v, run 1 ended at %v: the PS did not restore the saved parameters", start2, after)
	}
	if !(after2 < start2) {
		t.Errorf("run 2: held-out loss %v -> %v: epoch 1 did not train", start2, after2)
	}
	run2.checkSteps(t, 120, 120)
	order := run1.samplesByBatch()
	for j := range 2 {
		want := fmt.Sprintf("ps %d restored step 60 from %s (storage): %d batches applied, w sha256 %s", j, saved[j].dir, torchPSBatches, saved[j].digest)
		if !strings.Contains(run2.out, want) {
			t.Errorf("run 2: PS %d did not restore step 60 with the saved slice (%q)", j, want)
		}
		b := run2.trainedOn(j)
		checkOnce(t, fmt.Sprintf("run 2, PS %d", j), b, 1, torchPSSamples)
		if n := len(b); n != torchPSBatches {
			t.Errorf("run 2: PS %d was pushed %d batches, want the %d of epoch 1", j, n, torchPSBatches)
		}
	}
	skipped := run2.batchesOf(false, 0)
	checkOnce(t, "run 2's skipped batches", skipped, 0, torchPSSamples)
	for _, b := range skipped {
		if !slices.Equal(b.samples, order[b.id]) {
			t.Errorf("batch %d is samples %v in run 2, %v in run 1: the batches are not the same across runs", b.id, b.samples, order[b.id])
		}
	}
	maps2 := run2.samplesByBatch()

	// Run 3: the newest step of each PS lost.
	for j := range 2 {
		if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("ps-%d", j), ckpt.StepDir(120))); err != nil {
			t.Fatal(err)
		}
	}
	restored := make([]psCheckpoint, 2)
	for j := range 2 {
		restored[j] = readPSCheckpoint(t, dir, j)
		if restored[j].step != 100 {
			t.Fatalf("PS %d's newest valid checkpoint is step %d, want 100 (steps 75, 100 kept)", j, restored[j].step)
		}
	}
	run3 := runTorchPS(t, dir, 2)
	run3.checkSteps(t, 120, 120)
	all := make([]int, 0, 2*torchPSBatches)
	for e := range 2 {
		for k := range torchPSBatches {
			all = append(all, e*torchPSSamples+k*torchPSBatch)
		}
	}
	for j, r := range restored {
		want := fmt.Sprintf("ps %d restored step 100 from %s (storage): 100 batches applied, w sha256 %s", j, r.dir, r.digest)
		if !strings.Contains(run3.out, want) {
			t.Errorf("run 3: PS %d did not restore step 100 with the saved slice (%q)", j, want)
		}
		trained := batchIDs(run3.trainedOn(j))
		if len(trained) != 20 {
			t.Errorf("run 3: PS %d was pushed %d batches, want the 20 its step 100 lacked", j, len(trained))
		}
		if both := intersect(r.applied, trained); len(both) > 0 {
			t.Errorf("run 3: PS %d was pushed batches %v, which its step 100 had applied: trained twice", j, both)
		}
		if u := merged(r.applied, trained); !slices.Equal(u, all) {
			t.Errorf("run 3: PS %d's step 100 and its pushes hold batches %v, want every batch of two epochs once", j, u)
		}
		// The samples of epoch 1 on PS j: those of the batches its step
		// 100 holds (as run 2 trained them), and run 3's.
		var epoch1 []psBatch
		for _, id := range r.applied {
			if id >= torchPSSamples {
				epoch1 = append(epoch1, psBatch{epoch: 1, id: id, samples: maps2[id]})
			}
		}
		epoch1 = append(epoch1, run3.trainedOn(j)...)
		checkOnce(t, fmt.Sprintf("run 3, PS %d with its step 100", j), epoch1, 1, torchPSSamples)
	}
	for _, b := range run3.batchesOf(true, -1) {
		if m := maps2[b.id]; !slices.Equal(b.samples, m) {
			t.Errorf("batch %d is samples %v in run 3, %v in run 2", b.id, b.samples, m)
		}
	}
}

// psRun is the output of one run of examples/parameter_server.
type psRun struct {
	out     string
	batches []psBatch
}

// psBatch is a worker's log line of one batch.
type psBatch struct {
	trained bool // else skipped: every PS had applied it
	epoch   int
	id      int // epoch*samples + the position of its first sample
	samples []int
	ps      []int // the PS it was pushed to
}

// runTorchPS runs the example (2 PS, 3 workers, a chief) for epochs in all,
// the PS checkpointing into ckptDir, and returns its output.
func runTorchPS(t *testing.T, ckptDir string, epochs int) *psRun {
	t.Helper()
	job := uniqueJob("torchps")
	script := filepath.Join(repoRoot, "examples", "parameter_server", "ps_train.py")
	// Every role gets the same command: each reads the flags of its role.
	argv := fmt.Sprintf("[%q, -u, %q, --epochs=%d, --samples=%d, --shard-size=30, --batch-size=%d, %q, --ckpt-keep=%d, --persist-every=%d, --log-samples]",
		pythonExec, script, epochs, torchPSSamples, torchPSBatch, "--ckpt-dir="+ckptDir, torchPSKeep, torchPSPersistEvery)
	yaml := fmt.Sprintf(`apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: %s}
spec:
  distributionStrategy: ParameterServerStrategy
  envs: {TP_SOCKET_IFNAME: lo, GLOO_SOCKET_IFNAME: lo}
  replicaSpecs:
    ps: {replicas: 2, template: {spec: {containers: [{name: main, command: %[2]s}]}}}
    chief: {replicas: 1, restartCount: 0, template: {spec: {containers: [{name: main, command: %[2]s}]}}}
    worker: {replicas: 3, restartCount: 0, template: {spec: {containers: [{name: main, command: %[2]s}]}}}
`, job, argv)
	file := filepath.Join(t.TempDir(), "ps.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	s := submit(t, job, file)
	if code := s.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("rover submit (%d epochs) exited with %d, want 0", epochs, code)
	}
	r := &psRun{out: s.stdout.String()}
	re := regexp.MustCompile(`(?m)^\[[^]]+\]worker \d+ (trained|skipped) epoch (\d+) batch (\d+) samples ([\d,]+)(?: ps ([\d,]+))?$`)
	for _, m := range re.FindAllStringSubmatch(r.out, -1) {
		b := psBatch{trained: m[1] == "trained", epoch: mustAtoi(t, m[2]), id: mustAtoi(t, m[3]), samples: mustInts(t, m[4])}
		if m[5] != "" {
			b.ps = mustInts(t, m[5])
		}
		r.batches = append(r.batches, b)
	}
	if len(r.batches) == 0 {
		t.Fatalf("the workers logged no batch:\n%s", lastLines(r.out, 40))
	}
	return r
}

// loss is the chief's held-out loss before and after training.
func (r *psRun) loss(t *testing.T) (before, after float64) {
	t.Helper()
	m := regexp.MustCompile(`chief: 3 workers done; held-out loss ([0-9.e+-]+) -> ([0-9.e+-]+)`).FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("the chief did not report its loss:\n%s", lastLines(r.out, 40))
	}
	before, _ = strconv.ParseFloat(m[1], 64)
	after, _ = strconv.ParseFloat(m[2], 64)
	return before, after
}

// checkSteps checks the steps the chief found the PS at, and that no PS
// refused a batch it had applied (one pushed twice).
func (r *psRun) checkSteps(t *testing.T, ps0, ps1 int) {
	t.Helper()
	if want := fmt.Sprintf("chief: ps at steps %d,%d, 0 pushes refused as applied already", ps0, ps1); !strings.Contains(r.out, want) {
		t.Errorf("the chief did not log %q:\n%s", want, lastLines(r.out, 20))
	}
}

// trainedOn is the batches pushed to PS j.
func (r *psRun) trainedOn(j int) []psBatch {
	var out []psBatch
	for _, b := range r.batches {
		if b.trained && slices.Contains(b.ps, j) {
			out = append(out, b)
		}
	}
	return out
}

// batchesOf is the batches trained (or skipped) of epoch (-1: any).
func (r *psRun) batchesOf(trained bool, epoch int) []psBatch {
	var out []psBatch
	for _, b := range r.batches {
		if b.trained == trained && (epoch < 0 || b.epoch == epoch) {
			out = append(out, b)
		}
	}
	return out
}

// samplesByBatch is each logged batch's samples, by batch id.
func (r *psRun) samplesByBatch() map[int][]int {
	m := map[int][]int{}
	for _, b := range r.batches {
		m[b.id] = b.samples
	}
	return m
}

// checkOnce checks that batches hold every sample of epoch exactly once,
// and no other epoch's.
func checkOnce(t *testing.T, what string, batches []psBatch, epoch, samples int) {
	t.Helper()
	count := make([]int, samples)
	var others, outside []int // batches of other epochs; samples outside the set
	for _, b := range batches {
		if b.epoch != epoch {
			others = append(others, b.id)
			continue
		}
		for _, i := range b.samples {
			if i < 0 || i >= samples {
				outside = append(outside, i)
				continue
			}
			count[i]++
		}
	}
	var missing, twice []int
	for i, n := range count {
		switch {
		case n == 0:
			missing = append(missing, i)
		case n > 1:
			twice = append(twice, i)
		}
	}
	if len(others) > 0 || len(outside) > 0 {
		t.Errorf("%s: batches %v of other epochs than %d, samples %v outside the %d-sample set", what, others, epoch, outside, samples)
	}
	if len(missing) > 0 || len(twice) > 0 {
		t.Errorf("%s: epoch %d: samples %v not trained, %v trained more than once", what, epoch, missing, twice)
	}
}

// psCheckpoint is what package ckpt reads from a PS's checkpoint directory.
type psCheckpoint struct {
	dir     string
	step    int64
	digest  string // SHA-256 of the slice's bytes
	applied []int  // the batches applied, sorted
}

// readPSCheckpoint reads PS j's newest valid checkpoint under dir with
// Rover's own reader: the latest marker, the manifest, the CRC32C and the
// safetensors layout are checked.
func readPSCheckpoint(t *testing.T, dir string, j int) psCheckpoint {
	t.Helper()
	ctx := context.Background()
	c := psCheckpoint{dir: filepath.Join(dir, fmt.Sprintf("ps-%d", j))}
	b, err := ckpt.OpenBucket(ctx, c.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := ckpt.LoadLatest(ctx, b)
	if err != nil {
		t.Fatalf("PS %d's checkpoint: %v", j, err)
	}
	if m.WorldSize != 1 || len(m.Files) != 1 || m.Files[0].Path != ckpt.RankPath(m.Step, 0) {
		t.Errorf("PS %d's step %d manifest: world size %d, files %+v; want one file, %s", j, m.Step, m.WorldSize, m.Files, ckpt.RankPath(m.Step, 0))
	}
	tensors, meta, err := ckpt.LoadRank(ctx, b, m, 0)
	if err != nil {
		t.Fatalf("PS %d's step %d file: %v", j, m.Step, err)
	}
	if meta[ckpt.MetaStep] != strconv.FormatInt(m.Step, 10) {
		t.Errorf("PS %d's step %d file has %s=%q", j, m.Step, ckpt.MetaStep, meta[ckpt.MetaStep])
	}
	c.step = m.Step
	var sawW, sawApplied bool
	for _, x := range tensors {
		switch {
		case x.Name == "state.w" && x.DType == "F32" && slices.Equal(x.Shape, []int64{8}):
			sum := sha256.Sum256(x.Data)
			c.digest, sawW = hex.EncodeToString(sum[:]), true
		case x.Name == "state.applied" && x.DType == "I64" && len(x.Shape) == 1:
			for k := range x.Shape[0] {
				c.applied = append(c.applied, int(int64(binary.LittleEndian.Uint64(x.Data[8*k:]))))
			}
			sawApplied = true
		}
	}
	if !sawW || !sawApplied {
		t.Fatalf("PS %d's step %d file lacks the F32[8] state.w or the I64 state.applied: %+v", j, m.Step, tensors)
	}
	slices.Sort(c.applied)
	return c
}

func batchIDs(bs []psBatch) []int {
	ids := make([]int, 0, len(bs))
	for _, b := range bs {
		ids = append(ids, b.id)
	}
	slices.Sort(ids)
	return ids
}

func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// merged is a and b, sorted, a value in both kept twice.
func merged(a, b []int) []int {
	u := slices.Concat(a, b)
	slices.Sort(u)
	return u
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustInts(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Split(s, ",") {
		out = append(out, mustAtoi(t, f))
	}
	return out
}
