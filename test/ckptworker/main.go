// Command ckptworker is a Go worker program for Rover's tests of the Go
// SDK's flash checkpoint. In its first attempt (TORCHELASTIC_RESTART_COUNT
// 0) each rank saves steps 1 to 5, persisting step 4, waits for the
// persistence, records what it saved, and then rank 1 exits 3 (after rank
// 0 is done) so that the group restarts; in the second attempt each rank
// loads what memory and storage hold and records it. With --huge it
// instead checks that a save larger than shared memory fails cleanly.
// Everything it finds goes to JSON files in --out, for the test to judge.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/roverml/rover/sdk/go/rover"
)

func main() {
	out := flag.String("out", "", "directory for the JSON results")
	url := flag.String("url", "", "checkpoint storage (a directory or file:// URL)")
	huge := flag.Bool("huge", false, "try a save larger than any /dev/shm and write huge-<RANK>.json")
	mode := flag.String("mode", rover.ModeSharded, "checkpoint mode; in replicated mode every rank saves rank 0's state")
	keep := flag.Int("keep", 0, "the committed steps the checkpointer declares (0: none)")
	hold := flag.Bool("hold", false, "save steps 1 to 3 to memory only, write held-<RANK> in --out, and run until SIGTERM")
	noLoad := flag.Bool("no-initial-load", false, "skip the first attempt's check that nothing is there to load (for a storage that is not reachable yet)")
	flag.Parse()
	var err error
	switch {
	case *huge:
		err = runHuge(*out)
	case *hold:
		err = runHold(*out, *url)
	default:
		err = run(*out, *url, *mode, *keep, !*noLoad)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ckptworker:", err)
		os.Exit(1)
	}
}

// Snapshot is one step of a rank's state, as saved or loaded.
type Snapshot struct {
	Found   bool           `json:"found"`
	Step    int64          `json:"step"`
	Tensors []rover.Tensor `json:"tensors"`
	Extra   []byte         `json:"extra"`
}

// Loaded is what a restarted rank finds.
type Loaded struct {
	Steps    []int64  `json:"steps"`    // Steps, before anything else
	Load     Snapshot `json:"load"`     // Load: the newest step in memory
	Restore  Snapshot `json:"restore"`  // Restore: the newest committed step in storage
	Step4    Snapshot `json:"step4"`    // LoadStep(4) after the restore
	Step3    Snapshot `json:"step3"`    // LoadStep(3): no longer in memory
	Restored []int64  `json:"restored"` // Steps after the restore
}

// state is rank's deterministic state at step.
func state(rank int, step int64) ([]rover.Tensor, []byte) {
	w := make([]byte, 0, 4*3*(rank+2))
	for i := range 3 * (rank + 2) {
		w = binary.LittleEndian.AppendUint32(w, math.Float32bits(float32(1000*step)+float32(10*rank)+float32(i)*0.5))
	}
	var b []byte
	for i := range step + 1 {
		b = binary.LittleEndian.AppendUint64(b, uint64(step*100+int64(rank)*10+i))
	}
	lr := binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1*float64(step)))
	mask := []byte{1, byte(step % 2), byte(rank % 2)}
	return []rover.Tensor{
		{Name: "model.w", DType: "F32", Shape: []int64{int64(rank + 2), 3}, Data: w},
		{Name: "model.b", DType: "I64", Shape: []int64{step + 1}, Data: b},
		{Name: "optim.lr", DType: "F64", Shape: []int64{}, Data: lr},
		{Name: "mask", DType: "BOOL", Shape: []int64{3}, Data: mask},
		{Name: "empty", DType: "F16", Shape: []int64{0, 4}, Data: []byte{}},
	}, []byte(fmt.Sprintf("rank %d step %d", rank, step))
}

func run(out, url, mode string, keep int, checkEmpty bool) error {
	ctx := context.Background()
	c, err := rover.Connect()
	if err != nil {
		return err
	}
	rank, restart := os.Getenv("RANK"), os.Getenv("TORCHELASTIC_RESTART_COUNT")
	var r int
	fmt.Sscan(rank, &r)
	k := c.Checkpointer(url, rover.CheckpointOptions{Mode: mode, Keep: keep})
	stateRank := r
	if mode == rover.ModeReplicated {
		stateRank = 0 // every rank holds the same state
	}
	if restart != "0" {
		return restarted(ctx, k, filepath.Join(out, "loaded-"+rank+".json"))
	}
	if checkEmpty {
		if _, _, _, found, err := k.Load(ctx); err != nil || found {
			return fmt.Errorf("a first attempt found a checkpoint (%v) or failed: %w", found, err)
		}
	}
	saved := map[int64]Snapshot{}
	for step := int64(1); step <= 5; step++ {
		tensors, extra := state(stateRank, step)
		if err := k.Save(ctx, step, tensors, extra, step == 4); err != nil {
			return err
		}
		saved[step] = Snapshot{Found: true, Step: step, Tensors: tensors, Extra: extra}
	}
	durable, err := k.Wait(ctx)
	if err != nil {
		return err
	}
	// In replicated mode only local rank 0 saves; another rank's Wait waits
	// for what rank 0 has queued so far, which may be nothing yet.
	if durable != 4 && stateRank == r {
		return fmt.Errorf("durable step after Wait is %d, want 4", durable)
	}
	// A load after saves (a rollback) returns the step saved last, from
	// memory: in replicated mode rank 1 reads local rank 0's copy.
	step, tensors, extra, found, err := k.Load(ctx)
	if err != nil || !found || step != 5 {
		return fmt.Errorf("load after saving steps 1-5: step %d, found %v, %v; want step 5", step, found, err)
	}
	if !sameState(tensors, extra, saved[5]) {
		return fmt.Errorf("load after saving steps 1-5 returned other tensors than step 5's")
	}
	if err := writeJSON(filepath.Join(out, "saved-"+rank+".json"), saved); err != nil {
		return err
	}
	// Rank 1 fails only once rank 0 is done, so that the restart cannot cut
	// rank 0's saves short; rank 0 runs until the agent stops it.
	done0 := filepath.Join(out, "done-0")
	if r == 0 {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM)
		if err := os.WriteFile(done0, nil, 0o644); err != nil {
			return err
		}
		<-stop
		os.Exit(143)
	}
	for {
		if _, err := os.Stat(done0); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "ckptworker rank %s: failing on purpose after saving steps 1-5\n", rank)
	os.Exit(3)
	return nil
}

// restarted records what a restarted rank finds in memory and storage.
func restarted(ctx context.Context, k *rover.Checkpointer, path string) error {
	var l Loaded
	var err error
	if l.Steps, err = k.Steps(ctx); err != nil {
		return err
	}
	s := &l.Load
	if s.Step, s.Tensors, s.Extra, s.Found, err = k.Load(ctx); err != nil {
		return err
	}
	s = &l.Restore
	if s.Step, s.Tensors, s.Extra, s.Found, err = k.Restore(ctx); err != nil {
		return err
	}
	l.Step4.Step, l.Step3.Step = 4, 3
	if l.Step4.Tensors, l.Step4.Extra, l.Step4.Found, err = k.LoadStep(ctx, 4); err != nil {
		return err
	}
	if l.Step3.Tensors, l.Step3.Extra, l.Step3.Found, err = k.LoadStep(ctx, 3); err != nil {
		return err
	}
	if l.Restored, err = k.Steps(ctx); err != nil {
		return err
	}
	return writeJSON(path, l)
}

// sameState reports whether tensors and extra are want's, in any order.
func sameState(tensors []rover.Tensor, extra []byte, want Snapshot) bool {
	if len(tensors) != len(want.Tensors) || !bytes.Equal(extra, want.Extra) {
		return false
	}
	for _, w := range want.Tensors {
		i := slices.IndexFunc(tensors, func(t rover.Tensor) bool { return t.Name == w.Name })
		if i < 0 || tensors[i].DType != w.DType || !slices.Equal(tensors[i].Shape, w.Shape) || !bytes.Equal(tensors[i].Data, w.Data) {
			return false
		}
	}
	return true
}

// Huge is what --huge finds.
type Huge struct {
	CreateErr   string  `json:"create_err"`    // a first save larger than /dev/shm (creates the arena)
	CreateIsShm bool    `json:"create_is_shm"` // errors.Is(err, rover.ErrShmTooSmall)
	ResizeErr   string  `json:"resize_err"`    // the same after a small save (grows the arena)
	ResizeIsShm bool    `json:"resize_is_shm"`
	FillCalled  bool    `json:"fill_called"` // SaveFunc's fill ran for the huge tensor
	Steps       []int64 `json:"steps"`       // the steps in memory at the end
}

func runHuge(out string) error {
	ctx := context.Background()
	c, err := rover.Connect()
	if err != nil {
		return err
	}
	k := c.Checkpointer("", rover.CheckpointOptions{})
	var h Huge
	// 4 PiB declared, nothing allocated: SaveFunc asks the agent for the
	// slot before it touches any tensor.
	huge := []rover.Tensor{{Name: "huge", DType: "U8", Shape: []int64{1 << 52}}}
	fill := func(rover.Tensor, []byte) error {
		h.FillCalled = true
		return errors.New("fill must not be called")
	}
	err = k.SaveFunc(ctx, 1, huge, nil, false, fill)
	h.CreateIsShm = errors.Is(err, rover.ErrShmTooSmall)
	if err != nil {
		h.CreateErr = err.Error()
	}
	tensors, extra := state(0, 1)
	if err := k.Save(ctx, 1, tensors, extra, false); err != nil {
		return err
	}
	err = k.SaveFunc(ctx, 2, huge, nil, false, fill)
	h.ResizeIsShm = errors.Is(err, rover.ErrShmTooSmall)
	if err != nil {
		h.ResizeErr = err.Error()
	}
	if h.Steps, err = k.Steps(ctx); err != nil {
		return err
	}
	return writeJSON(filepath.Join(out, "huge-"+os.Getenv("RANK")+".json"), h)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// runHold saves steps 1 to 3 to memory only (never persisting), marks
// held-<RANK> in out, and runs until the agent stops it: what a stopped
// agent must persist is what memory holds.
func runHold(out, url string) error {
	ctx := context.Background()
	c, err := rover.Connect()
	if err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	var r int
	fmt.Sscan(os.Getenv("RANK"), &r)
	k := c.Checkpointer(url, rover.CheckpointOptions{})
	for step := int64(1); step <= 3; step++ {
		tensors, extra := state(r, step)
		if err := k.Save(ctx, step, tensors, extra, false); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(out, "held-"+os.Getenv("RANK")), nil, 0o644); err != nil {
		return err
	}
	<-stop
	os.Exit(143)
	return nil
}
