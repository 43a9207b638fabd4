package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dlroverJob runs examples/dlrover_compat/train.py, a DDP script written
// only against DLRover's Python API, on one node of two workers, started
// by prog ("rover run", or the binary invoked as dlrover-run), with the
// job's checkpoint storage in dir/ckpt. It returns the result rank 0 wrote.
// Under `rover run` the launcher names the storage too; under dlrover-run,
// as DLRover's users launch it, only the script does (its checkpointer
// declares it).
func dlroverJob(t *testing.T, dir, prog string, extra ...string) ddpResult {
	t.Helper()
	store := filepath.Join(dir, "ckpt")
	args := []string{"--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--stop-grace-period", "5s"}
	if prog != "dlrover-run" {
		args = append(args, "--checkpoint-dir", store)
	}
	args = append(args, filepath.Join(repoRoot, "examples", "dlrover_compat", "train.py"),
		"--checkpoint-dir", store, "--out", filepath.Join(dir, "out.json"), "--log", filepath.Join(dir, "starts.log"))
	args = append(args, extra...)
	c := &cluster{t: t, dir: dir}
	var p *process
	if prog == "dlrover-run" {
		link := filepath.Join(dir, "dlrover-run")
		if err := os.Symlink(roverBin, link); err != nil {
			t.Fatal(err)
		}
		p = c.startCmd("dlrover-run", link, args...)
	} else {
		p = c.start("rover run", append([]string{"run"}, args...)...)
	}
	if code := p.wait(t, jobTimeout); code != 0 {
		t.Fatalf("%s exited %d:\n%s", prog, code, p.out)
	}
	return readResult(t, filepath.Join(dir, "out.json"))
}

// TestDLRoverAPIScriptResumesFromMemory runs a script written against
// DLRover's documented API (DdpCheckpointer with StorageType.MEMORY every
// step and StorageType.DISK every 10, ElasticDistributedSampler, the state
// loaded with load_checkpoint at start) twice: straight through under
// `rover run`, and under `dlrover-run` with worker 1 crashing before step
// 24. The crashed job restarts once, resumes from step 23 in memory (storage
// had step 20 only), and ends with the same weights, bit for bit: the model,
// the optimizer and the sampler's position came back exactly.
func TestDLRoverAPIScriptResumesFromMemory(t *testing.T) {
	cleanDir := t.TempDir()
	clean := dlroverJob(t, cleanDir, "rover run")
	if clean.Step != 48 || clean.WorldSize != 2 || clean.RestartCount != 0 {
		t.Fatalf("uninterrupted run: step %d world %d restarts %d; want 48, 2, 0", clean.Step, clean.WorldSize, clean.RestartCount)
	}
	dir := t.TempDir()
	marker := filepath.Join(dir, "crashed")
	crashed := dlroverJob(t, dir, "dlrover-run", "--crash-at-step", "24", "--crash-rank", "1", "--crash-marker", marker)
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the crash was not injected")
	}
	if crashed.Step != 48 || crashed.RestartCount != 1 {
		t.Fatalf("crashed run: step %d restarts %d; want 48, 1", crashed.Step, crashed.RestartCount)
	}
	starts, _ := os.ReadFile(filepath.Join(dir, "starts.log"))
	for _, want := range []string{"restart=1 rank=0 start_step=23", "restart=1 rank=1 start_step=23"} {
		if !strings.Contains(string(starts), want) {
			t.Errorf("no %q: the restart did not resume from step 23 in memory; starts:\n%s", want, starts)
		}
	}
	if d := maxRelDiff(t, clean.Weights, crashed.Weights); d != 0 {
		t.Errorf("weights differ by %g relative after the crash, want identical", d)
	}
	for _, run := range []string{cleanDir, dir} {
		latest, err := os.ReadFile(filepath.Join(run, "ckpt", "latest"))
		if err != nil || strings.TrimSpace(string(latest)) != "48" {
			t.Errorf("%s: storage's latest = %q (%v), want the last StorageType.DISK step 48", run, latest, err)
		}
	}
}
