package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkShardedNodeLoss measures what losing a node costs a sharded job
// with backup peers and without (make bench-backup-restore;
// docs/benchmarks.md, "Backup peers"). `rover submit` runs two nodes of
// two DDP workers in sharded mode (train.py --flash-mode sharded), saving
// to memory every step and persisting every BACKUP_PERSIST_EVERY steps
// (20); node 1 is lost (its agent and workers SIGKILLed, its shared memory
// removed) at a step that moves through the persist interval from run to
// run. "backup": node 0 keeps node 1's shards (the default), and the
// replacement fetches them. "storage": --checkpoint-backup-bytes 0, no
// backups (what losing the backup peer too comes to): every rank loads
// storage's newest committed step. It reports the steps rolled back (the
// newest step every rank saved before the loss, less the step the new
// world resumed from) and the time from the loss to the new world's
// first step on every rank.
func BenchmarkShardedNodeLoss(b *testing.B) {
	every := 20
	if v, err := strconv.Atoi(os.Getenv("BACKUP_PERSIST_EVERY")); err == nil && v > 0 {
		every = v
	}
	for _, mode := range []string{"backup", "storage"} {
		b.Run(mode, func(b *testing.B) {
			var lost, down float64
			for i := range b.N {
				l, d := nodeLossOnce(b, mode, every, i)
				b.Logf("run %d: lost node 1, rolled back %d steps, first step again after %v", i, l, d.Round(time.Millisecond))
				lost += float64(l)
				down += d.Seconds()
			}
			b.ReportMetric(lost/float64(b.N), "steps-lost")
			b.ReportMetric(down/float64(b.N), "s-to-first-step")
		})
	}
}

// nodeLossOnce runs the job, loses node 1 at a step past a committed
// checkpoint, and returns the steps rolled back and the time to the new
// world's first step.
func nodeLossOnce(b *testing.B, mode string, every, run int) (int, time.Duration) {
	dir := b.TempDir()
	saves, times, world := filepath.Join(dir, "saves.log"), filepath.Join(dir, "times.log"), filepath.Join(dir, "world.log")
	job := uniqueJob("nodeloss-" + mode)
	args := []string{"--rdzv-id", job, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-conf", rdzvConf,
		"--checkpoint-dir", filepath.Join(dir, "ckpt"), "--checkpoint-keep", "2"}
	if mode == "storage" {
		args = append(args, "--checkpoint-backup-bytes", "0")
	}
	args = append(args, filepath.Join(repoRoot, "examples", "ddp", "train.py"), "--steps", "100000", "--flash",
		"--flash-mode", "sharded", "--ckpt-every", strconv.Itoa(every), "--step-sleep", "0.05",
		"--log-saves", saves, "--log-times", times, "--log-world", world)
	s := submit(b, job, args...)
	defer func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		<-s.done
	}()
	// The loss falls at 1..every steps past a persisted step.
	target := 2*every + 1 + (run*7)%every
	waitStep(b, saves, target)
	loseNode(b, s, s.node(1, 0))
	kill := time.Now()
	newest := newestSaved(b, saves, 4)
	var ev map[string]time.Time
	waitFor(b, 3*time.Minute, "every rank to train again", func() bool {
		ev = lastEvents(times, kill)
		return !ev["trained"].IsZero()
	})
	starts := readRestarts(b, world, worldLines(b, world)-4, 4)
	step := sameStep(b, starts)
	want := map[string]string{"backup": "memory", "storage": "storage"}[mode]
	for _, st := range starts {
		if st.source != want {
			b.Fatalf("%s: %q, want every rank from %s", mode, st.line, want)
		}
	}
	if step > newest {
		b.Fatalf("resumed at step %d, past the newest saved, %d", step, newest)
	}
	fmt.Fprintf(os.Stderr, "%s run %d: lost at step %d, resumed at %d\n", mode, run, newest, step)
	return newest - step, ev["trained"].Sub(kill)
}
