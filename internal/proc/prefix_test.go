package proc

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// recordWriter records each Write call separately.
type recordWriter struct {
	mu     sync.Mutex
	writes []string
}

func (r *recordWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

func (r *recordWriter) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.writes, "")
}

func TestPrefixWriter(t *testing.T) {
	long := strings.Repeat("x", maxLine)
	tests := []struct {
		name   string
		writes []string
		want   []string // dst Write calls, including Close's
	}{
		{"no output", nil, nil},
		{"one line", []string{"hello\n"}, []string{"[p]:hello\n"}},
		{"lines of one write batched", []string{"a\nb\n"}, []string{"[p]:a\n[p]:b\n"}},
		{"split line", []string{"he", "llo\nwor", "ld\n"}, []string{"[p]:hello\n", "[p]:world\n"}},
		{"partial line flushed on close", []string{"a\nb"}, []string{"[p]:a\n", "[p]:b\n"}},
		{"empty lines kept", []string{"\n\n"}, []string{"[p]:\n[p]:\n"}},
		{"line of exactly maxLine", []string{long, "\n"}, []string{"[p]:" + long + "\n"}},
		{"long line in pieces", []string{long + "yz\n"}, []string{"[p]:" + long + "\n", "[p]:yz\n"}},
		{"long line across writes", []string{long[:10], long[10:] + "y", "z"}, []string{"[p]:" + long + "\n", "[p]:yz\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dst recordWriter
			w := NewPrefixWriter(&dst, "[p]:")
			for _, s := range tt.writes {
				n, err := w.Write([]byte(s))
				if n != len(s) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(s), n, err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, dst.writes); diff != "" {
				t.Errorf("dst writes (-want +got):\n%s", diff)
			}
			if err := w.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if _, err := w.Write([]byte("late\n")); err == nil {
				t.Error("Write after Close succeeded")
			}
		})
	}
}

func TestPrefixWriterBoundedBatches(t *testing.T) {
	var dst recordWriter
	w := NewPrefixWriter(&dst, "[p]:")
	line := strings.Repeat("z", 99) + "\n"
	in := strings.Repeat(line, 10000) // ~1 MB in one Write
	if _, err := w.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.all(), strings.Repeat("[p]:"+line, 10000); got != want {
		t.Fatalf("output differs: got %d bytes, want %d", len(got), len(want))
	}
	for i, s := range dst.writes {
		if len(s) > 2*maxLine+2*len("[p]:")+2 || !strings.HasSuffix(s, "\n") {
			t.Errorf("write %d: %d bytes, ends with newline %v", i, len(s), strings.HasSuffix(s, "\n"))
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken") }

func TestPrefixWriterError(t *testing.T) {
	w := NewPrefixWriter(failWriter{}, "")
	if _, err := w.Write([]byte("a\n")); err == nil {
		t.Error("Write to failing dst succeeded")
	}
	if _, err := w.Write([]byte("partial")); err != nil {
		t.Errorf("buffered Write: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Error("Close flushing to failing dst succeeded")
	}
}

func TestPrefixWritersConcurrent(t *testing.T) {
	var buf bytes.Buffer
	dst := NewSyncWriter(&buf)
	const writers, lines = 8, 200
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			w := NewPrefixWriter(dst, fmt.Sprintf("[w%d]:", i))
			defer w.Close()
			for j := range lines {
				// Lines arrive in fragments to exercise buffering.
				line := fmt.Sprintf("line %d of writer %d\n", j, i)
				for k := 0; k < len(line); k += 5 {
					if _, err := w.Write([]byte(line[k:min(k+5, len(line))])); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	next := make([]int, writers)
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	for _, l := range got {
		var i, j, i2 int
		if _, err := fmt.Sscanf(l, "[w%d]:line %d of writer %d", &i, &j, &i2); err != nil || i != i2 || i < 0 || i >= writers {
			t.Fatalf("mangled line %q", l)
		}
		if j != next[i] {
			t.Fatalf("writer %d: got line %d, want %d", i, j, next[i])
		}
		next[i]++
	}
	if len(got) != writers*lines {
		t.Errorf("got %d lines, want %d", len(got), writers*lines)
	}
}
