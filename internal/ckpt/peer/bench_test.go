package peer

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/roverml/rover/internal/ckpt"
)

// benchSize is the snapshot the benchmarks move: 1 GiB.
const benchSize = 1 << 30

// BenchmarkRestore1GiB compares three ways a node gets a 1 GiB snapshot
// into its memory: from a peer agent over loopback (Handler to Fetch, with
// the receiver's CRC32C), a plain memory copy (what a restore from the
// node's own memory costs at least), and a read of the file from storage
// with its CRC32C (the local file system; the file was just written, so it
// is read from the page cache unless memory is short: the best case of
// storage). docs/benchmarks.md has the figures.
//
//	go test ./internal/ckpt/peer/ -run '^$' -bench Restore1GiB -benchtime 5x
func BenchmarkRestore1GiB(b *testing.B) {
	data := payload(benchSize)
	dst := make([]byte, benchSize)
	for i := range dst {
		dst[i] = 1 // fault the pages in, as an arena's pre-faulted slot is
	}
	b.Run("peer-loopback", func(b *testing.B) {
		addr := serveBench(b, &Handler{Run: "job", Token: "t", Src: &memSource{step: 1, data: data, crc: ckpt.CRC32C(data)}})
		sink := &fixedSink{buf: dst}
		b.SetBytes(benchSize)
		b.ResetTimer()
		for range b.N {
			if _, err := Fetch(context.Background(), Request{Addr: addr, Run: "job", Token: "t", Step: 1}, sink); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memory-copy", func(b *testing.B) {
		b.SetBytes(benchSize)
		for range b.N {
			copy(dst, data)
		}
	})
	b.Run("storage-read", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "rank-0.safetensors")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchSize)
		b.ResetTimer()
		for range b.N {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for n < benchSize {
				m, err := f.Read(dst[n:])
				if err != nil {
					b.Fatal(err)
				}
				n += m
			}
			f.Close()
			if ckpt.CRC32C(dst) == 0 {
				b.Fatal("zero CRC")
			}
		}
	})
}

// fixedSink hands out the same pre-faulted memory every time.
type fixedSink struct{ buf []byte }

func (s *fixedSink) Begin(step, size int64) ([]byte, error) { return s.buf[:size], nil }
func (s *fixedSink) Commit(step, size int64) error          { return nil }
func (s *fixedSink) Abort()                                 {}
