package agent

import (
	"encoding/binary"
	"os"
	"testing"
)

func putRecord(b []byte, off int, seqBegin, step, at, seqEnd uint64) {
	binary.LittleEndian.PutUint64(b[off:], seqBegin)
	binary.LittleEndian.PutUint64(b[off+8:], step)
	binary.LittleEndian.PutUint64(b[off+16:], at)
	binary.LittleEndian.PutUint64(b[off+24:], seqEnd)
}

// TestStepSlotTornRecord: a worker killed while writing a record leaves the
// other record, the step before, as the slot's value; a zeroed slot holds
// no step; the newest whole record wins.
func TestStepSlotTornRecord(t *testing.T) {
	b := make([]byte, stepSlotSize)
	if _, ok := parseStepSlot(b); ok {
		t.Error("a zeroed slot holds a step")
	}
	putRecord(b, 32, 7, 41, 1000, 7)
	putRecord(b, 0, 8, 42, 2000, 6) // torn: seq 8 begun, not ended
	if s, ok := parseStepSlot(b); !ok || s.Step != 41 || s.AtUnixNanos != 1000 {
		t.Errorf("torn newest record: got %+v, %v; want step 41 at 1000", s, ok)
	}
	putRecord(b, 0, 8, 42, 2000, 8)
	if s, ok := parseStepSlot(b); !ok || s.Step != 42 {
		t.Errorf("whole records: got %+v, %v; want step 42", s, ok)
	}
	if _, ok := parseStepSlot(b[:40]); ok {
		t.Error("a slot of the wrong size holds a step")
	}
}

// TestStepSlotsReset: a group's slots start zeroed (an older group's step
// is not read), and the newest step over the local ranks is the group's.
func TestStepSlotsReset(t *testing.T) {
	dir := t.TempDir()
	if err := resetStepSlots(dir, 2); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, stepSlotSize)
	putRecord(b, 32, 1, 9, 5, 1)
	if err := os.WriteFile(stepSlotPath(dir, 1), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := readStepSlots(dir, 2); err != nil || !s.OK || s.Step != 9 {
		t.Errorf("got %+v, %v; want step 9", s, err)
	}
	if err := resetStepSlots(dir, 2); err != nil {
		t.Fatal(err)
	}
	if s, err := readStepSlots(dir, 3); err != nil || s.OK {
		t.Errorf("after a reset (and a rank without a slot): got %+v, %v; want no step", s, err)
	}
}
