package ckpt

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestArenaSaves(t *testing.T) {
	type want struct {
		step  int64
		slot  int
		slots [2]SlotInfo
	}
	empty := SlotInfo{}
	valid := func(step int64, n int64, commit uint64) SlotInfo {
		return SlotInfo{State: SlotValid, Step: step, Length: n, Commit: commit}
	}
	tests := []struct {
		name  string
		saves []int64 // steps saved in order, payload of 100+step bytes
		want  want
	}{
		{"first save goes to slot 0", []int64{1}, want{1, 0, [2]SlotInfo{valid(1, 101, 1), empty}}},
		{"second to slot 1", []int64{1, 2}, want{2, 1, [2]SlotInfo{valid(1, 101, 1), valid(2, 102, 2)}}},
		{"third reuses slot 0", []int64{1, 2, 3}, want{3, 0, [2]SlotInfo{valid(3, 103, 3), valid(2, 102, 2)}}},
		{"newest is by commit, not step", []int64{5, 3}, want{3, 1, [2]SlotInfo{valid(5, 105, 1), valid(3, 103, 2)}}},
		{"same step twice", []int64{4, 4}, want{4, 1, [2]SlotInfo{valid(4, 104, 1), valid(4, 104, 2)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newArena(t, 4096)
			if _, ok := a.Latest(); ok {
				t.Fatal("Latest on a new arena found a snapshot")
			}
			for _, s := range tt.saves {
				save(t, a, s, payload(s, 100+int(s)))
			}
			snap, ok := a.Latest()
			if !ok || snap.Step != tt.want.step || snap.Slot != tt.want.slot || !bytes.Equal(snap.Data, payload(snap.Step, 100+int(snap.Step))) {
				t.Errorf("Latest = step %d slot %d (ok %v), want step %d slot %d with its payload", snap.Step, snap.Slot, ok, tt.want.step, tt.want.slot)
			}
			slots, err := a.Slots()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want.slots, slots); diff != "" {
				t.Errorf("Slots (-want +got):\n%s", diff)
			}
			// Another mapping (another process) sees the same.
			other, ok := openAgain(t, a).Latest()
			if !ok || other.Step != snap.Step || !bytes.Equal(other.Data, snap.Data) {
				t.Errorf("second mapping: Latest = step %d (ok %v), want %d", other.Step, ok, snap.Step)
			}
		})
	}
}

func TestArenaValid(t *testing.T) {
	a := newArena(t, 4096)
	for _, s := range []int64{1, 2, 3} {
		save(t, a, s, payload(s, 10))
	}
	for step, want := range map[int64]bool{1: false, 2: true, 3: true, 4: false} {
		snap, ok := a.Valid(step)
		if ok != want || (ok && (snap.Step != step || !bytes.Equal(snap.Data, payload(step, 10)))) {
			t.Errorf("Valid(%d) = step %d, %v; want found=%v", step, snap.Step, ok, want)
		}
	}
}

// TestArenaCrashBeforeCommit: a save that never commits (the writer died
// in the copy) is never returned; the previous snapshot survives.
func TestArenaCrashBeforeCommit(t *testing.T) {
	a := newArena(t, 8192)
	save(t, a, 1, payload(1, 5000))
	slot, tok, err := a.BeginWrite(2)
	if err != nil {
		t.Fatal(err)
	}
	copy(slot, bytes.Repeat([]byte{0xff}, len(slot))) // garbage, no Commit
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := OpenArena(a.Path()[:len(a.Path())-len("/arena")], "arena")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	snap, ok := b.Latest()
	if !ok || snap.Step != 1 || !bytes.Equal(snap.Data, payload(1, 5000)) {
		t.Fatalf("after a crashed save: Latest = step %d (ok %v), want step 1 intact", snap.Step, ok)
	}
	slots, _ := b.Slots()
	if slots[1].State != SlotWriting {
		t.Errorf("the crashed slot is %v, want writing", slots[1].State)
	}
	// The next writer takes over the abandoned slot; the dead writer's
	// token can no longer commit it.
	save(t, b, 2, payload(2, 10))
	if err := b.Commit(tok, 10); !errors.Is(err, ErrStaleToken) {
		t.Errorf("Commit with the dead writer's token = %v, want ErrStaleToken", err)
	}
	if snap, _ := b.Latest(); snap.Step != 2 {
		t.Errorf("Latest = step %d, want 2", snap.Step)
	}
}

// TestArenaKilledWriter is TestArenaCrashBeforeCommit with a real process
// killed by SIGKILL in the middle of a save.
func TestArenaKilledWriter(t *testing.T) {
	a := newArena(t, 8192)
	save(t, a, 7, payload(7, 6000))
	dir, name := a.Path()[:len(a.Path())-len("/arena")], "arena"
	cmd := exec.Command(os.Args[0], "-test.run=^$", dir, name)
	cmd.Env = append(os.Environ(), helperEnv+"=crash-writer")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("helper: %v, want death by signal; output:\n%s", err, out)
	}
	slots, _ := a.Slots()
	if slots[1].State != SlotWriting || slots[1].Step != 99 {
		t.Fatalf("slot 1 = %+v, want the helper's unfinished save of step 99", slots[1])
	}
	snap, ok := a.Latest()
	if !ok || snap.Step != 7 || !bytes.Equal(snap.Data, payload(7, 6000)) {
		t.Fatalf("Latest = step %d (ok %v), want step 7 intact", snap.Step, ok)
	}
}

func TestArenaWriteErrors(t *testing.T) {
	a := newArena(t, 4096)
	_, tok1, err := a.BeginWrite(1)
	if err != nil {
		t.Fatal(err)
	}
	_, tok2, err := a.BeginWrite(2) // abandons the first
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(tok1, 1); !errors.Is(err, ErrStaleToken) {
		t.Errorf("Commit of an abandoned write = %v, want ErrStaleToken", err)
	}
	if err := a.Commit(tok2, a.SlotSize()+1); !errors.Is(err, ErrSlotTooSmall) {
		t.Errorf("Commit past the slot = %v, want ErrSlotTooSmall", err)
	}
	if err := a.Commit(tok2, 0); err != nil {
		t.Errorf("Commit of an empty payload: %v", err)
	}
	if err := a.Commit(tok2, 0); !errors.Is(err, ErrStaleToken) {
		t.Errorf("second Commit of one write = %v, want ErrStaleToken", err)
	}
	if _, _, err := a.BeginWrite(-1); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("BeginWrite(-1) = %v, want ErrInvalidInput", err)
	}
}

func TestArenaChecksum(t *testing.T) {
	a := newArena(t, 4096)
	save(t, a, 1, payload(1, 1000))
	snap, _ := a.Latest()
	if slots, _ := a.Slots(); slots[0].Checksummed {
		t.Error("a lazy Commit recorded a checksum")
	}
	sum, err := a.Checksum(snap)
	if err != nil || sum != CRC32C(payload(1, 1000)) {
		t.Fatalf("Checksum = %08x, %v; want %08x", sum, err, CRC32C(payload(1, 1000)))
	}
	if slots, _ := a.Slots(); !slots[0].Checksummed {
		t.Error("Checksum did not record the checksum")
	}
	// Another process reads it and finds the payload damaged.
	b := openAgain(t, a)
	bsnap, _ := b.Latest()
	bsnap.Data[500] ^= 1
	if _, err := b.Checksum(bsnap); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Checksum of a damaged payload = %v, want ErrCorrupt", err)
	}
	bsnap.Data[500] ^= 1

	// CommitWithCRC records it at once.
	slot, tok, _ := a.BeginWrite(2)
	copy(slot, payload(2, 300))
	if err := a.CommitWithCRC(tok, 300); err != nil {
		t.Fatal(err)
	}
	if slots, _ := a.Slots(); !slots[1].Checksummed {
		t.Error("CommitWithCRC did not record the checksum")
	}
	snap2, _ := a.Latest()
	if sum, err := a.Checksum(snap2); err != nil || sum != CRC32C(payload(2, 300)) {
		t.Errorf("Checksum after CommitWithCRC = %08x, %v", sum, err)
	}
	// Two saves later, the step 1 snapshot is gone.
	if err := a.Check(snap); err != nil {
		t.Errorf("Check of an intact snapshot: %v", err)
	}
	_, _, _ = a.BeginWrite(3) // starts overwriting slot 0
	if err := a.Check(snap); !errors.Is(err, ErrOverwritten) {
		t.Errorf("Check of an overwritten snapshot = %v, want ErrOverwritten", err)
	}
	if _, err := a.Checksum(snap); !errors.Is(err, ErrOverwritten) {
		t.Errorf("Checksum of an overwritten snapshot = %v, want ErrOverwritten", err)
	}
}

// TestArenaConcurrentReader runs a writer and a reader with its own
// mapping side by side: whatever the reader confirms with Check must be
// exactly one committed payload.
func TestArenaConcurrentReader(t *testing.T) {
	a := newArena(t, 64<<10)
	r := openAgain(t, a)
	const saves = 300
	length := func(step int64) int { return 1000 + int(step*211)%(60<<10) }
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for s := int64(1); s <= saves; s++ {
			save(t, a, s, payload(s, length(s)))
		}
	})
	confirmed, last := 0, int64(0)
	check := func() {
		snap, ok := r.Latest()
		if !ok {
			return
		}
		got := bytes.Clone(snap.Data)
		if r.Check(snap) != nil {
			return // overwritten while copied: discarded, as the protocol says
		}
		if !bytes.Equal(got, payload(snap.Step, length(snap.Step))) {
			t.Errorf("confirmed read of step %d has the wrong content", snap.Step)
		}
		if snap.Step < last {
			t.Errorf("Latest went back from step %d to %d", last, snap.Step)
		}
		confirmed, last = confirmed+1, snap.Step
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		check()
	}
	wg.Wait()
	check()
	if last != saves {
		t.Errorf("after the writer finished: Latest = step %d, want %d (%d reads confirmed)", last, saves, confirmed)
	}
}

func TestArenaClose(t *testing.T) {
	a := newArena(t, 4096)
	save(t, a, 1, payload(1, 10))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, ok := a.Latest(); ok {
		t.Error("Latest after Close found a snapshot")
	}
	if _, _, err := a.BeginWrite(2); !errors.Is(err, ErrClosed) {
		t.Errorf("BeginWrite after Close = %v, want ErrClosed", err)
	}
	if err := a.Resize(1 << 20); !errors.Is(err, ErrClosed) {
		t.Errorf("Resize after Close = %v, want ErrClosed", err)
	}
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove: stat = %v, want not exist", err)
	}
}

// TestArenaDefaultDir creates an arena where production does, in /dev/shm.
func TestArenaDefaultDir(t *testing.T) {
	name := "rover-ckpt-test-" + t.Name()
	a, err := CreateArena("", name, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Remove()
	if a.Path() != DefaultArenaDir+"/"+name {
		t.Errorf("Path = %q", a.Path())
	}
	fi, err := os.Stat(a.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != arenaHeaderSize+2*4096 {
		t.Errorf("arena file: mode %v size %d, want 0600 and %d", fi.Mode().Perm(), fi.Size(), arenaHeaderSize+2*4096)
	}
}

func TestTouchPages(t *testing.T) {
	a := newArena(t, 3*4096+1) // rounded up to 4 pages
	if a.SlotSize() != 4*4096 {
		t.Errorf("SlotSize = %d, want %d", a.SlotSize(), 4*4096)
	}
	touchPages(a.mem) // the fallbacks must not disturb anything
	touchPagesWrite(a.mem)
	save(t, a, 1, payload(1, 4*4096))
	if snap, ok := a.Latest(); !ok || !bytes.Equal(snap.Data, payload(1, 4*4096)) {
		t.Error("a full-slot save did not read back")
	}
}

// TestArenaRemoteWriter is the local API's flow: the agent begins and
// commits, a worker in another process writes the slot through its own
// handle on the file, at the offset the token gives.
func TestArenaRemoteWriter(t *testing.T) {
	a := newArena(t, 3*4096)
	worker, err := os.OpenFile(a.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	for _, step := range []int64{1, 2, 3} {
		_, tok, err := a.BeginWrite(step)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Size() != a.SlotSize() || tok.Offset() != arenaHeaderSize+int64(tok.Slot())*a.SlotSize() {
			t.Fatalf("token: slot %d offset %d size %d", tok.Slot(), tok.Offset(), tok.Size())
		}
		if _, err := worker.WriteAt(payload(step, 9000), tok.Offset()); err != nil {
			t.Fatal(err)
		}
		if err := a.Commit(tok, 9000); err != nil {
			t.Fatal(err)
		}
		snap, ok := a.Latest()
		if !ok || snap.Step != step || snap.Offset != tok.Offset() || !bytes.Equal(snap.Data, payload(step, 9000)) {
			t.Fatalf("Latest = step %d at %d (ok %v), want step %d at %d", snap.Step, snap.Offset, ok, step, tok.Offset())
		}
		got := make([]byte, 9000)
		if _, err := worker.ReadAt(got, snap.Offset); err != nil || !bytes.Equal(got, snap.Data) {
			t.Fatalf("reading the file at the snapshot's offset: %v", err)
		}
	}
}

func TestBeginWriteAvoidingPinnedSlot(t *testing.T) {
	a := newArena(t, 4096)
	save(t, a, 1, payload(1, 100))
	save(t, a, 2, payload(2, 100))
	pinned, ok := a.Valid(1)
	if !ok {
		t.Fatal("step 1 is gone")
	}
	// Steps 3 and 4 must both go to the slot that does not hold step 1.
	for step := int64(3); step <= 4; step++ {
		slot, tok, err := a.BeginWriteAvoiding(step, pinned.Slot)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Slot() == pinned.Slot {
			t.Fatalf("step %d was written into the pinned slot %d", step, pinned.Slot)
		}
		copy(slot, payload(step, 100))
		if err := a.Commit(tok, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := a.Valid(1); !ok {
		t.Error("the pinned step 1 was overwritten")
	}
	if latest, ok := a.Latest(); !ok || latest.Step != 4 {
		t.Errorf("latest = %v, %v; want step 4", latest.Step, ok)
	}
}

func TestArenaDrop(t *testing.T) {
	a := newArena(t, 4096)
	save(t, a, 1, payload(1, 101))
	save(t, a, 2, payload(2, 102))
	two, _ := a.Valid(2)
	if err := a.Drop(two); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Valid(2); ok {
		t.Fatal("step 2 still found after Drop")
	}
	if err := a.Check(two); !errors.Is(err, ErrOverwritten) {
		t.Fatalf("Check of a dropped snapshot: %v, want ErrOverwritten", err)
	}
	if latest, ok := a.Latest(); !ok || latest.Step != 1 {
		t.Fatalf("Latest after dropping step 2 = %d (ok %v), want step 1", latest.Step, ok)
	}
	if other, ok := openAgain(t, a).Latest(); !ok || other.Step != 1 {
		t.Fatalf("another mapping: Latest = %d (ok %v), want step 1", other.Step, ok)
	}
	// Dropping it again, or a snapshot whose slot was reused, changes nothing.
	one, _ := a.Valid(1)
	save(t, a, 3, payload(3, 103)) // into the dropped slot
	save(t, a, 4, payload(4, 104)) // over step 1
	for _, s := range []Snapshot{two, one} {
		if err := a.Drop(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []int64{3, 4} {
		if snap, ok := a.Valid(step); !ok || !bytes.Equal(snap.Data, payload(step, 100+int(step))) {
			t.Fatalf("step %d lost after dropping stale snapshots", step)
		}
	}
	// The next save after a drop goes to the empty slot, keeping the newest.
	four, _ := a.Valid(4)
	if err := a.Drop(four); err != nil {
		t.Fatal(err)
	}
	save(t, a, 5, payload(5, 105))
	if _, ok := a.Valid(3); !ok {
		t.Fatal("the save after a drop overwrote the remaining snapshot")
	}
}
