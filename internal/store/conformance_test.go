package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// journal is what the conformance suite needs of a backend.
type journal interface {
	Append(ctx context.Context, recs [][]byte) error
	Snapshot(ctx context.Context, state []byte) error
	Load(ctx context.Context) (Contents, error)
	Close() error
}

var (
	_ journal = (*Memory)(nil)
	_ journal = (*Bolt)(nil)
)

// backend makes a fresh store and reopens one as a restarted master would.
type backend struct {
	name string
	// open returns a fresh store and a function that reopens it, returning
	// the store to use from then on.
	open func(t *testing.T) (journal, func(t *testing.T, s journal) journal)
}

var backends = []backend{
	{"memory", func(*testing.T) (journal, func(*testing.T, journal) journal) {
		// A Memory survives a master restarted in the same process: the
		// master is handed the same value.
		return NewMemory(), func(_ *testing.T, s journal) journal { return s }
	}},
	{"bolt", func(t *testing.T) (journal, func(*testing.T, journal) journal) {
		dir := t.TempDir()
		s := mustOpen(t, dir, Options{})
		return s, func(t *testing.T, s journal) journal {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return mustOpen(t, dir, Options{})
		}
	}},
}

// mustOpen opens the store in dir, closing it at the end of the test. A nil
// logger in opts discards the log.
func mustOpen(t testing.TB, dir string, opts Options) *Bolt {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// discard returns a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func recs(ss ...string) [][]byte {
	r := make([][]byte, len(ss))
	for i, s := range ss {
		r[i] = []byte(s)
	}
	return r
}

func mustAppend(t testing.TB, s journal, r [][]byte) {
	t.Helper()
	if err := s.Append(context.Background(), r); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func mustSnapshot(t testing.TB, s journal, state string) {
	t.Helper()
	if err := s.Snapshot(context.Background(), []byte(state)); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
}

func checkLoad(t testing.TB, s journal, want Contents) {
	t.Helper()
	got, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

func TestConformance(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, s journal, reopen func(*testing.T, journal) journal)
	}{
		{"empty", func(t *testing.T, s journal, _ func(*testing.T, journal) journal) {
			checkLoad(t, s, Contents{Records: [][]byte{}})
		}},
		{"groups keep their order", func(t *testing.T, s journal, _ func(*testing.T, journal) journal) {
			mustAppend(t, s, recs("a"))
			mustAppend(t, s, recs("b", "c"))
			mustAppend(t, s, nil)
			mustAppend(t, s, recs("d", "e", "f"))
			checkLoad(t, s, Contents{Records: recs("a", "b", "c", "d", "e", "f")})
		}},
		{"snapshot drops the records before it", func(t *testing.T, s journal, _ func(*testing.T, journal) journal) {
			mustAppend(t, s, recs("a", "b"))
			mustSnapshot(t, s, "s1")
			checkLoad(t, s, Contents{Snapshot: []byte("s1"), Records: [][]byte{}})
			mustAppend(t, s, recs("c"))
			mustAppend(t, s, recs("d"))
			checkLoad(t, s, Contents{Snapshot: []byte("s1"), Records: recs("c", "d")})
			mustSnapshot(t, s, "s2")
			mustSnapshot(t, s, "s3")
			mustAppend(t, s, recs("e"))
			checkLoad(t, s, Contents{Snapshot: []byte("s3"), Records: recs("e")})
		}},
		{"empty records and snapshots load as nil", func(t *testing.T, s journal, _ func(*testing.T, journal) journal) {
			mustAppend(t, s, [][]byte{{}, nil})
			checkLoad(t, s, Contents{Records: [][]byte{nil, nil}})
			mustSnapshot(t, s, "")
			checkLoad(t, s, Contents{Records: [][]byte{}})
		}},
		{"copies are not aliased", func(t *testing.T, s journal, _ func(*testing.T, journal) journal) {
			r := []byte("rec")
			state := []byte("state")
			mustAppend(t, s, [][]byte{state})
			if err := s.Snapshot(ctx, state); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, s, [][]byte{r})
			r[0], state[0] = 'X', 'X'
			got, err := s.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got.Snapshot[0], got.Records[0][0] = 'Y', 'Y'
			checkLoad(t, s, Contents{Snapshot: []byte("state"), Records: recs("rec")})
		}},
		{"a closed store fails", func(t *testing.T, s journal, _ func(*testing.T, journal) journal) {
			mustAppend(t, s, recs("a"))
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := s.Append(ctx, recs("b")); !errors.Is(err, ErrClosed) {
				t.Errorf("Append after Close = %v, want ErrClosed", err)
			}
			if err := s.Snapshot(ctx, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Snapshot after Close = %v, want ErrClosed", err)
			}
			if _, err := s.Load(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("Load after Close = %v, want ErrClosed", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close = %v, want nil", err)
			}
		}},
		{"a reopened store keeps everything", func(t *testing.T, s journal, reopen func(*testing.T, journal) journal) {
			mustAppend(t, s, recs("a", "b"))
			s = reopen(t, s)
			checkLoad(t, s, Contents{Records: recs("a", "b")})
			mustSnapshot(t, s, "s1")
			s = reopen(t, s)
			checkLoad(t, s, Contents{Snapshot: []byte("s1"), Records: [][]byte{}})
			mustAppend(t, s, recs("c"))
			s = reopen(t, s)
			mustAppend(t, s, recs("d", "e"))
			s = reopen(t, s)
			checkLoad(t, s, Contents{Snapshot: []byte("s1"), Records: recs("c", "d", "e")})
		}},
		{"concurrent loads see whole groups", func(t *testing.T, s journal, _ func(*testing.T, journal) journal) {
			const groups, size = 20, 5
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			wg.Add(2)
			go func() { // the master's single committer
				defer wg.Done()
				for g := range groups {
					var r [][]byte
					for i := range size {
						r = append(r, fmt.Appendf(nil, "%d/%d", g, i))
					}
					if err := s.Append(ctx, r); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				for range groups {
					c, err := s.Load(ctx)
					if err != nil {
						errs <- err
						return
					}
					if len(c.Records)%size != 0 {
						errs <- fmt.Errorf("Load saw %d records, not whole groups of %d", len(c.Records), size)
						return
					}
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			c, err := s.Load(ctx)
			if err != nil || len(c.Records) != groups*size {
				t.Errorf("Load = %d records, %v; want %d", len(c.Records), err, groups*size)
			}
		}},
	}
	for _, be := range backends {
		for _, tt := range tests {
			t.Run(be.name+"/"+tt.name, func(t *testing.T) {
				s, reopen := be.open(t)
				tt.run(t, s, reopen)
			})
		}
	}
}
