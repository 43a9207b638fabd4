package ckpt

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzDecode: Decode never panics, and whatever it accepts encodes again
// to a file that decodes to the same tensors and metadata.
func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	Encode(&buf, rankTensors(3, 1), rankMeta(3, 1))
	f.Add(buf.Bytes())
	buf.Reset()
	Encode(&buf, []Tensor{{Name: "z", DType: "F32", Shape: []int64{0}}, {Name: "s", DType: "I8", Shape: []int64{}, Data: []byte{1}}}, nil)
	f.Add(buf.Bytes())
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"k":"v"}}`, make([]byte, 4)))
	f.Add(rawFile(`{}`, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		tensors, meta, err := Decode(data)
		if err != nil {
			return
		}
		for _, tt := range tensors {
			if len(tt.Data) > 0 && (uintptr(unsafe.Pointer(&tt.Data[0])) < uintptr(unsafe.Pointer(&data[0])) ||
				uintptr(unsafe.Pointer(&tt.Data[len(tt.Data)-1])) > uintptr(unsafe.Pointer(&data[len(data)-1]))) {
				t.Fatalf("tensor %q points outside the file", tt.Name)
			}
		}
		var again bytes.Buffer
		if err := Encode(&again, tensors, meta); err != nil {
			t.Fatalf("Encode of what Decode accepted: %v", err)
		}
		tensors2, meta2, err := Decode(again.Bytes())
		if err != nil {
			t.Fatalf("Decode of the re-encoded file: %v", err)
		}
		if diff := cmp.Diff(byName(tensors), byName(tensors2), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("tensors changed (-first +second):\n%s", diff)
		}
		if diff := cmp.Diff(meta, meta2, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("metadata changed (-first +second):\n%s", diff)
		}
	})
}

// heapArena is an arena over ordinary, 8-byte aligned memory.
func heapArena(t *testing.T, hdr []byte, slots int64) (*Arena, error) {
	words := make([]uint64, (arenaHeaderSize+2*slots*arenaPage)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	copy(mem[:arenaHeaderSize], hdr)
	lay, err := parseArenaHeader(mem[:arenaHeaderSize], int64(len(mem)))
	if err != nil {
		return nil, err
	}
	return &Arena{mem: mem, slotSize: lay.slotSize, unmap: func([]byte) error { return nil }}, nil
}

// FuzzArenaHeader: any header either is rejected or yields an arena whose
// readers stay inside their slots, that a writer can save into and read
// back.
func FuzzArenaHeader(f *testing.F) {
	good := make([]byte, arenaHeaderSize)
	initArenaHeader(good, arenaPage)
	f.Add(good[:128], uint8(1))
	saved := bytes.Clone(good)
	h := header{saved}
	h.slotWord(1, slGen).Store(4)
	h.slotWord(1, slState).Store(uint64(SlotValid))
	h.slotWord(1, slLength).Store(100)
	h.slotWord(1, slCRC).Store(crcWord(7, 4))
	h.slotWord(1, slCommit).Store(9)
	h.word(hdrNewest).Store(2)
	f.Add(saved[:128], uint8(2))
	f.Fuzz(func(t *testing.T, prefix []byte, slots uint8) {
		hdr := make([]byte, arenaHeaderSize)
		copy(hdr, prefix)
		a, err := heapArena(t, hdr, 1+int64(slots%4))
		if err != nil {
			return
		}
		lo, hi := arenaHeaderSize, arenaHeaderSize+2*a.slotSize
		within := func(s Snapshot) bool {
			if len(s.Data) == 0 {
				return true
			}
			off := int64(uintptr(unsafe.Pointer(&s.Data[0])) - uintptr(unsafe.Pointer(&a.mem[0])))
			return off >= int64(lo) && off+int64(len(s.Data)) <= int64(hi) && int64(len(s.Data)) <= a.slotSize
		}
		if s, ok := a.Latest(); ok && !within(s) {
			t.Fatalf("Latest = slot %d of %d bytes, outside its slot", s.Slot, len(s.Data))
		}
		if s, ok := a.Valid(int64(binary.LittleEndian.Uint64(hdr[hdrSlots+slStep:]))); ok {
			if !within(s) {
				t.Fatalf("Valid = slot %d of %d bytes, outside its slot", s.Slot, len(s.Data))
			}
			_, _ = a.Checksum(s)
		}
		if _, err := a.Slots(); err != nil {
			t.Fatal(err)
		}
		save(t, a, 77, payload(77, 50))
		if s, ok := a.Latest(); !ok || s.Step != 77 || !bytes.Equal(s.Data, payload(77, 50)) {
			t.Fatalf("after a save: Latest = step %d (ok %v), want 77", s.Step, ok)
		}
		if _, err := parseArenaHeader(a.mem[:arenaHeaderSize], int64(len(a.mem))); err != nil {
			t.Fatalf("a save left an invalid header: %v", err)
		}
	})
}

// FuzzParseManifest: ParseManifest never panics, and what it accepts
// marshals back to an equal manifest.
func FuzzParseManifest(f *testing.F) {
	for _, m := range []Manifest{testManifest(12, 3, Sharded, 0, 1, 2), testManifest(1, 4, Replicated, 2)} {
		b, _ := MarshalManifest(m)
		f.Add(b)
	}
	f.Add([]byte(`{"schema":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		b, err := MarshalManifest(m)
		if err != nil {
			t.Fatalf("MarshalManifest of what ParseManifest accepted: %v", err)
		}
		m2, err := ParseManifest(b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Errorf("round trip (-first +second):\n%s", diff)
		}
	})
}
