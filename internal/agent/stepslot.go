package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Step slots: each local worker's newest completed step, written by
// rover.progress into a small file of the agent's private runtime
// directory that it maps into memory (a memory write per step, no system
// call, no message), and read by the agent once the workers of a group all
// exited. A killed worker sends nothing, and a worker's progress reports go
// at most once a second, so the slots are how the agent knows the last
// step a group completed (NODE_EVENT_KIND_LAST_STEP), from which the
// master counts the steps a restart computes again.
//
// The path is derived from what every worker has: the directory of
// ROVER_AGENT_SOCKET, then steps/<LOCAL_RANK>. The agent creates the slots
// zeroed before a group's workers start, so a slot never holds an older
// group's step.
//
// A slot is two records of 32 bytes, little-endian, written alternately:
// the record's sequence number, the step, its wall time (Unix nanoseconds),
// the sequence number again. A record is whole when both sequence numbers
// are equal and not 0; a worker killed while writing one leaves the other,
// the step before, whole. The slot's value is its whole record with the
// higher sequence number.
const (
	stepSlotRecord = 32
	stepSlotSize   = 2 * stepSlotRecord
)

// stepSlotsDir is where the agent whose runtime directory is dir keeps the
// slots; python/rover/progress.py derives the same path.
func stepSlotsDir(runtimeDir string) string { return filepath.Join(runtimeDir, "steps") }

func stepSlotPath(dir string, local int) string { return filepath.Join(dir, strconv.Itoa(local)) }

// resetStepSlots creates the slots of n local ranks in dir, zeroed.
func resetStepSlots(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the workers' step slots: %w", err)
	}
	zero := make([]byte, stepSlotSize)
	for local := 0; local < n; local++ {
		if err := os.WriteFile(stepSlotPath(dir, local), zero, 0o600); err != nil {
			return fmt.Errorf("create the step slot of local rank %d: %w", local, err)
		}
	}
	return nil
}

// lastStep is the newest step the workers of a group completed.
type lastStep struct {
	Step, AtUnixNanos int64
	OK                bool // some worker recorded a step
}

// readStepSlots returns the newest step recorded in the slots of n local
// ranks (the workers exited: nothing writes them any more). A missing slot
// (a worker that never called rover.progress, or its slot not created)
// counts as no step.
func readStepSlots(dir string, n int) (lastStep, error) {
	var best lastStep
	var errs []error
	for local := 0; local < n; local++ {
		b, err := os.ReadFile(stepSlotPath(dir, local))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read the step slot of local rank %d: %w", local, err))
			continue
		}
		if s, ok := parseStepSlot(b); ok && (!best.OK || s.Step > best.Step) {
			best = s
		}
	}
	return best, errors.Join(errs...)
}

// parseStepSlot decodes a slot; ok is false when it holds no whole record
// of a step (never written, or not a slot).
func parseStepSlot(b []byte) (lastStep, bool) {
	if len(b) != stepSlotSize {
		return lastStep{}, false
	}
	var best lastStep
	var bestSeq uint64
	for off := 0; off < stepSlotSize; off += stepSlotRecord {
		r := b[off : off+stepSlotRecord]
		seq, end := binary.LittleEndian.Uint64(r[0:]), binary.LittleEndian.Uint64(r[24:])
		step, at := int64(binary.LittleEndian.Uint64(r[8:])), int64(binary.LittleEndian.Uint64(r[16:]))
		if seq == 0 || seq != end || step < 0 || at < 0 || seq <= bestSeq {
			continue
		}
		best, bestSeq = lastStep{Step: step, AtUnixNanos: at, OK: true}, seq
	}
	return best, best.OK
}
