package ckpt

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestMetadataWhileTheWriterRewritesIt reads a snapshot's metadata, and
// decodes it, from shared memory that another writer keeps changing, as
// the agent does while a worker saves its next step into the slot: each
// read answers the metadata or a corruption error, and never panics
// (encoding/json panics when its input changes between its validity scan
// and its decode).
func TestMetadataWhileTheWriterRewritesIt(t *testing.T) {
	meta := map[string]string{MetaStep: "12", MetaRank: "3", "pad": strings.Repeat("a", 1024)}
	var enc bytes.Buffer
	if err := Encode(&enc, []Tensor{{Name: "w", DType: "F32", Shape: []int64{4}, Data: make([]byte, 16)}}, meta); err != nil {
		t.Fatal(err)
	}
	// Shared memory, as an arena's: outside the Go heap, where the other
	// side's writes are a process's, not a goroutine's.
	mem, err := syscall.Mmap(-1, 0, enc.Len(), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	copy(mem, enc.Bytes())
	at := bytes.Index(mem, []byte("aaaa")) + 512 // inside the padding string

	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			mem[at] = '"' // ends the string early: the header is no longer JSON
			mem[at] = 'a'
		}
	}()
	defer func() { stop.Store(true); <-done }()

	var ok, corrupt int
	for range 5000 {
		got, err := Metadata(mem)
		switch {
		case err == nil:
			if got[MetaStep] != "12" || got[MetaRank] != "3" {
				t.Fatalf("metadata %v from a header that only ever held step 12 of rank 3", got)
			}
			ok++
		case errors.Is(err, ErrCorrupt):
			corrupt++
		default:
			t.Fatalf("Metadata: %v, want the metadata or ErrCorrupt", err)
		}
		if _, got, err := Decode(mem); err == nil && (got[MetaStep] != "12" || got[MetaRank] != "3") {
			t.Fatalf("Decode: metadata %v from a header that only ever held step 12 of rank 3", got)
		} else if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode: %v, want the snapshot or ErrCorrupt", err)
		}
	}
	if ok == 0 {
		t.Fatal("no read of 5000 saw the header whole")
	}
	t.Logf("%d reads whole, %d torn", ok, corrupt)
}
