package ckpt

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
)

// castagnoli is the CRC32C table; hash/crc32 uses the CPU's CRC32
// instruction for it where there is one (SSE4.2, ARMv8).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC32C (Castagnoli) checksum of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Arena is a double-buffered snapshot area in a shared-memory file. See the
// package documentation for the protocol and arenaheader.go for the layout.
//
// One process at a time is the arena's writer (it calls BeginWrite, Commit
// and Resize); any number of processes may read it. In one process an Arena
// may be used from several goroutines, but writer calls must not overlap.
type Arena struct {
	mu       sync.RWMutex // exclusive for Close and remaps, shared otherwise
	path     string
	f        *os.File
	mem      []byte   // the current mapping
	retired  [][]byte // earlier mappings, unmapped at Close (see remap)
	slotSize int64
	closed   bool
	unmap    func([]byte) error
}

// Snapshot is one committed snapshot in an arena.
type Snapshot struct {
	Step int64
	// Data is the payload. It aliases the shared memory: it stays readable
	// until the Arena is closed, but the writer overwrites it two saves
	// later. Copy what you need, then confirm with [Arena.Check].
	Data []byte
	// Slot is the slot (0 or 1) that holds it, and Offset the file offset
	// of Data, for a process that maps the arena file itself.
	Slot   int
	Offset int64

	gen uint64 // the slot's gen when the snapshot was taken
}

// SlotInfo describes one slot, for diagnostics.
type SlotInfo struct {
	State       SlotState
	Step        int64
	Length      int64
	Commit      uint64 // larger is newer
	Checksummed bool   // a CRC32C is recorded for the payload
}

// WriteToken ties a [Arena.Commit] to its [Arena.BeginWrite]. It also says
// where the slot is in the arena file, for a writer in another process (a
// Python worker) that fills the slot through its own mapping while the
// agent holds the token.
type WriteToken struct {
	slot     int
	gen      uint64 // the slot's (odd) gen while being written
	slotSize int64
}

// Slot is the slot being written (0 or 1).
func (t WriteToken) Slot() int { return t.slot }

// Offset is the file offset of the slot's first byte.
func (t WriteToken) Offset() int64 { return arenaHeaderSize + int64(t.slot)*t.slotSize }

// Size is the slot's capacity in bytes.
func (t WriteToken) Size() int64 { return t.slotSize }

// errRemap is returned inside locked sections when the header's slot size
// no longer matches the mapping: another handle resized the arena.
var errRemap = errors.New("arena resized")

// locked runs fn with the mapping held shared, remapping and retrying if fn
// finds that the arena was resized by another handle.
func (a *Arena) locked(fn func(h header) error) error {
	for {
		a.mu.RLock()
		if a.closed {
			a.mu.RUnlock()
			return ErrClosed
		}
		err := fn(header{a.mem})
		a.mu.RUnlock()
		if err != errRemap {
			return err
		}
		if err := a.remap(); err != nil {
			return err
		}
	}
}

// SlotSize is the capacity of each slot in bytes: the largest payload that
// fits.
func (a *Arena) SlotSize() int64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.slotSize
}

// Path is the arena file's path.
func (a *Arena) Path() string { return a.path }

func (a *Arena) slot(i int, length int64) []byte {
	off := arenaHeaderSize + int64(i)*a.slotSize
	return a.mem[off : off+length : off+length]
}

// BeginWrite starts a save of step: it marks the slot that does not hold the
// newest snapshot as being written and returns it for the caller to fill (at
// most SlotSize bytes, from offset 0). Until [Arena.Commit], readers see only
// the other slot, so a crash during the copy loses nothing that was
// committed. A BeginWrite without a Commit is abandoned by the next one.
func (a *Arena) BeginWrite(step int64) (slot []byte, tok WriteToken, err error) {
	return a.BeginWriteAvoiding(step, -1)
}

// BeginWriteAvoiding is BeginWrite that never writes slot avoid (0 or 1; -1
// for none): a slot being persisted is pinned this way. When avoid holds an
// older snapshot than the other slot, the write replaces the newest snapshot
// instead, so while a slot is pinned the arena is single-buffered (a crash
// mid-copy then falls back to the pinned, older snapshot).
func (a *Arena) BeginWriteAvoiding(step int64, avoid int) (slot []byte, tok WriteToken, err error) {
	if step < 0 {
		return nil, WriteToken{}, invalidf("step %d is negative", step)
	}
	err = a.locked(func(h header) error {
		idx, _, stale := h.newest(a.slotSize)
		if stale {
			return errRemap
		}
		target := 0
		if idx == 0 {
			target = 1
		}
		if target == avoid {
			target = 1 - avoid
		}
		g := h.beginChange(target)
		h.slotWord(target, slState).Store(uint64(SlotWriting))
		h.slotWord(target, slStep).Store(uint64(step))
		h.slotWord(target, slLength).Store(0)
		h.slotWord(target, slCRC).Store(0)
		h.slotWord(target, slCommit).Store(0)
		slot = a.slot(target, a.slotSize)
		tok = WriteToken{slot: target, gen: g, slotSize: a.slotSize}
		return nil
	})
	return slot, tok, err
}

// Commit publishes the first length bytes of the slot that tok's BeginWrite
// returned as the newest snapshot. It is O(1): the payload's CRC32C is not
// computed here but by the first [Arena.Checksum] (at persistence or
// restore), which records it for later readers to verify against. Use
// [Arena.CommitWithCRC] to pay for it now instead.
func (a *Arena) Commit(tok WriteToken, length int64) error {
	return a.commit(tok, length, false)
}

// CommitWithCRC is [Arena.Commit] that also computes and records the
// payload's CRC32C. That reads the whole payload again: about 0.1 s per GiB
// with the CRC32 instruction (9-10 GB/s measured), more than the copy into
// the slot itself (about 0.075 s per GiB).
func (a *Arena) CommitWithCRC(tok WriteToken, length int64) error {
	return a.commit(tok, length, true)
}

func (a *Arena) commit(tok WriteToken, length int64, withCRC bool) error {
	return a.locked(func(h header) error {
		if int64(h.word(hdrSlotSize).Load()) != a.slotSize {
			return errRemap
		}
		if tok.slotSize != a.slotSize || h.slotWord(tok.slot, slGen).Load() != tok.gen || tok.gen%2 == 0 {
			return fmt.Errorf("%w: slot %d was reused or resized since BeginWrite", ErrStaleToken, tok.slot)
		}
		if length < 0 || length > a.slotSize {
			return fmt.Errorf("%w: length %d, slot holds %d bytes; Resize the arena", ErrSlotTooSmall, length, a.slotSize)
		}
		var crc uint64
		if withCRC {
			crc = crcWord(CRC32C(a.slot(tok.slot, length)), tok.gen+1)
		}
		n := h.word(hdrCommits).Add(1)
		h.slotWord(tok.slot, slLength).Store(uint64(length))
		h.slotWord(tok.slot, slCRC).Store(crc)
		h.slotWord(tok.slot, slCommit).Store(n)
		h.slotWord(tok.slot, slState).Store(uint64(SlotValid))
		h.slotWord(tok.slot, slGen).Store(tok.gen + 1) // publish
		h.word(hdrNewest).Store(uint64(tok.slot + 1))
		return nil
	})
}

// Latest returns the newest committed snapshot, or false if there is none
// (or the arena is closed, or could not be mapped again after another
// handle resized it).
func (a *Arena) Latest() (Snapshot, bool) {
	return a.find(func(SlotInfo) bool { return true })
}

// Valid returns the newest committed snapshot of step, or false if no slot
// holds one.
func (a *Arena) Valid(step int64) (Snapshot, bool) {
	return a.find(func(s SlotInfo) bool { return s.Step == step })
}

func (a *Arena) find(match func(SlotInfo) bool) (Snapshot, bool) {
	var snap Snapshot
	found := false
	_ = a.locked(func(h header) error {
		found = false
		var best slotHdr
		for i := range 2 {
			s, ss, ok := h.read(i)
			if ok && ss != a.slotSize {
				return errRemap
			}
			if !ok || !s.holds(a.slotSize) || !match(SlotInfo{Step: s.step}) {
				continue
			}
			if !found || s.commit > best.commit {
				found, best = true, s
				snap = Snapshot{Step: s.step, Data: a.slot(i, s.length), Slot: i, gen: s.gen,
					Offset: arenaHeaderSize + int64(i)*a.slotSize}
			}
		}
		return nil
	})
	return snap, found
}

// Slots describes both slots.
func (a *Arena) Slots() ([2]SlotInfo, error) {
	var out [2]SlotInfo
	err := a.locked(func(h header) error {
		for i := range 2 {
			s, ss, ok := h.read(i)
			if ok && ss != a.slotSize {
				return errRemap
			}
			_, sum := s.checksum()
			out[i] = SlotInfo{State: s.state, Step: s.step, Length: s.length, Commit: s.commit, Checksummed: sum}
			if s.gen%2 == 1 {
				out[i].State = SlotWriting
			}
		}
		return nil
	})
	return out, err
}

// Check reports whether s is still intact: ErrOverwritten if the writer has
// begun to reuse its slot since s was taken. Call it after reading s.Data;
// if it returns nil, what was read is the committed snapshot.
func (a *Arena) Check(s Snapshot) error {
	return a.locked(func(h header) error {
		if s.Slot < 0 || s.Slot > 1 || h.stableGen(s.Slot) != s.gen {
			return fmt.Errorf("%w: step %d in slot %d", ErrOverwritten, s.Step, s.Slot)
		}
		return nil
	})
}

// Checksum computes the CRC32C of s.Data and returns it once it is known to
// be right: if a checksum is recorded for s (by [Arena.CommitWithCRC] or an
// earlier Checksum) the two must agree, else ErrCorrupt; if none is, this one
// is recorded. It fails with ErrOverwritten if the writer reused the slot in
// the meantime. Persistence and restore call it, so every snapshot that
// leaves the arena is checked against the first read of it.
func (a *Arena) Checksum(s Snapshot) (uint32, error) {
	sum := CRC32C(s.Data)
	err := a.locked(func(h header) error {
		if s.Slot < 0 || s.Slot > 1 {
			return fmt.Errorf("%w: slot %d", ErrOverwritten, s.Slot)
		}
		word := h.slotWord(s.Slot, slCRC)
		cur := word.Load()
		if h.stableGen(s.Slot) != s.gen {
			return fmt.Errorf("%w: step %d in slot %d", ErrOverwritten, s.Step, s.Slot)
		}
		if rec, ok := crcOf(cur, s.gen); ok {
			if rec != sum {
				return corruptf("arena %s slot %d (step %d): payload CRC32C %08x, committed %08x", a.path, s.Slot, s.Step, sum, rec)
			}
			return nil
		}
		// A stale CAS is harmless: the record names the generation it is
		// for, and the writer clears the word before reusing the slot.
		word.CompareAndSwap(cur, crcWord(sum, s.gen))
		if h.stableGen(s.Slot) != s.gen {
			return fmt.Errorf("%w: step %d in slot %d", ErrOverwritten, s.Step, s.Slot)
		}
		return nil
	})
	return sum, err
}

// Drop removes s from the arena when its slot still holds it (otherwise
// there is nothing to drop, and it returns nil): the slot becomes empty,
// and no reader finds s again; a reader that took s before confirms it
// with [Arena.Check], which then fails. It is a writer call: it must not
// overlap BeginWrite, Commit or Resize.
func (a *Arena) Drop(s Snapshot) error {
	return a.locked(func(h header) error {
		if s.Slot < 0 || s.Slot > 1 || h.stableGen(s.Slot) != s.gen || s.gen%2 == 1 {
			return nil
		}
		g := h.beginChange(s.Slot)
		h.slotWord(s.Slot, slState).Store(uint64(SlotEmpty))
		h.slotWord(s.Slot, slCRC).Store(0)
		h.slotWord(s.Slot, slCommit).Store(0)
		h.slotWord(s.Slot, slGen).Store(g + 1)
		if h.word(hdrNewest).Load() == uint64(s.Slot+1) {
			h.word(hdrNewest).Store(0) // a hint: readers compare the slots' commits
		}
		return nil
	})
}

// Close unmaps the arena; the file stays. Snapshots taken from it must not
// be used afterwards.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var errs []error
	for _, m := range append(a.retired, a.mem) {
		if err := a.unmap(m); err != nil {
			errs = append(errs, fmt.Errorf("unmapping arena %s: %w", a.path, err))
		}
	}
	a.retired, a.mem = nil, nil
	if a.f != nil {
		errs = append(errs, a.f.Close())
	}
	return errors.Join(errs...)
}

// Remove closes the arena and deletes its file. Other processes' mappings
// stay valid until they close theirs; the memory is freed after that.
func (a *Arena) Remove() error {
	err := a.Close()
	if a.path != "" {
		if rerr := os.Remove(a.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}
