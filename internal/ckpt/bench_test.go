package ckpt

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sizeFlag is a byte count that also takes KiB, MiB and GiB suffixes.
type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			v, mult = n, m
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("size %q: want a positive byte count, optionally with KiB, MiB or GiB", v)
	}
	*s = sizeFlag(n * mult)
	return nil
}

var benchSize = sizeFlag(64 << 20)

func init() {
	flag.Var(&benchSize, "ckpt.size", "payload size of the save benchmarks, e.g. 64MiB or 1GiB")
}

// benchPayload returns benchSize random bytes, every page touched.
func benchPayload() []byte {
	src := make([]byte, benchSize)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(src)
	return src
}

// BenchmarkArenaSave is the steady-state save: BeginWrite, a copy into a
// slot that was pre-faulted, Commit (lazy CRC).
func BenchmarkArenaSave(b *testing.B) {
	benchSave(b, false)
}

// BenchmarkArenaSaveCRC is BenchmarkArenaSave with CommitWithCRC.
func BenchmarkArenaSaveCRC(b *testing.B) {
	benchSave(b, true)
}

func benchSave(b *testing.B, withCRC bool) {
	src := benchPayload()
	a, err := CreateArena(arenaDir(b), "bench", int64(len(src)))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		slot, tok, err := a.BeginWrite(1)
		if err != nil {
			b.Fatal(err)
		}
		copy(slot, src)
		if withCRC {
			err = a.CommitWithCRC(tok, int64(len(src)))
		} else {
			err = a.Commit(tok, int64(len(src)))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkArenaSaveNoPrefault is the first save into an arena whose
// memory is reserved (fallocate) but not faulted in: each page costs a
// minor fault.
func BenchmarkArenaSaveNoPrefault(b *testing.B) {
	src := benchPayload()
	dir := arenaDir(b)
	b.SetBytes(int64(len(src)))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		a, err := createArena(dir, "bench", int64(len(src)), false)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		slot, tok, err := a.BeginWrite(1)
		if err != nil {
			b.Fatal(err)
		}
		copy(slot, src)
		if err := a.Commit(tok, int64(len(src))); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		a.Remove()
		b.StartTimer()
	}
}

// BenchmarkSaveFreshFile is a copy into a fresh mapping of a sparse
// shared-memory file, what a naive implementation does: each page is
// allocated, zeroed and faulted in during the copy.
func BenchmarkSaveFreshFile(b *testing.B) {
	src := benchPayload()
	path := filepath.Join(arenaDir(b), "fresh")
	b.SetBytes(int64(len(src)))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Truncate(int64(len(src))); err != nil {
			b.Fatal(err)
		}
		mem, err := unix.Mmap(int(f.Fd()), 0, len(src), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		copy(mem, src)
		b.StopTimer()
		unix.Munmap(mem)
		f.Close()
		os.Remove(path)
		b.StartTimer()
	}
}

// BenchmarkCopyGoSlices is a plain copy between two Go slices, both
// touched: the physical limit of a save.
func BenchmarkCopyGoSlices(b *testing.B) {
	src := benchPayload()
	dst := make([]byte, len(src))
	copy(dst, src)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkCRC32C is the cost that Commit defers to Checksum.
func BenchmarkCRC32C(b *testing.B) {
	src := benchPayload()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		CRC32C(src)
	}
}

// BenchmarkCreateArena is CreateArena with slots of the benchmark size:
// fallocate, mmap and the pre-faulting of both slots, paid once.
func BenchmarkCreateArena(b *testing.B) {
	dir := arenaDir(b)
	b.SetBytes(2 * int64(benchSize))
	for b.Loop() {
		a, err := CreateArena(dir, "bench", int64(benchSize))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		a.Remove()
		b.StartTimer()
	}
}
