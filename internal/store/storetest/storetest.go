// Package storetest is the contract every backend of the master's store
// keeps, as a test suite: groups of records in order, a snapshot that drops
// the records before it, copies never aliased, ErrClosed after Close, and
// everything kept across a reopen. It is test support; it owns no store.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) (storetest.Journal, storetest.Reopen) {
//			s := store.NewMemory()
//			return s, func(*testing.T, storetest.Journal) storetest.Journal { return s }
//		})
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/store"
)

// Journal is what the suite needs of a backend.
type Journal interface {
	Append(ctx context.Context, recs [][]byte) error
	Snapshot(ctx context.Context, state []byte) error
	Load(ctx context.Context) (store.Contents, error)
	Close() error
}

// Open returns a fresh, empty store and a function that reopens it as a
// restarted master would.
type Open func(t *testing.T) (Journal, Reopen)

// Reopen closes s (or not, for a store that survives in the process) and
// returns the store to use from then on.
type Reopen func(t *testing.T, s Journal) Journal

func recs(ss ...string) [][]byte {
	r := make([][]byte, len(ss))
	for i, s := range ss {
		r[i] = []byte(s)
	}
	return r
}

func mustAppend(t testing.TB, s Journal, r [][]byte) {
	t.Helper()
	if err := s.Append(context.Background(), r); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func mustSnapshot(t testing.TB, s Journal, state string) {
	t.Helper()
	if err := s.Snapshot(context.Background(), []byte(state)); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
}

func checkLoad(t testing.TB, s Journal, want store.Contents) {
	t.Helper()
	got, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

// Run runs the suite, each test on a fresh store from open.
func Run(t *testing.T, open Open) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, s Journal, reopen Reopen)
	}{
		{"empty", func(t *testing.T, s Journal, _ Reopen) {
			checkLoad(t, s, store.Contents{Records: [][]byte{}})
		}},
		{"groups keep their order", func(t *testing.T, s Journal, _ Reopen) {
			mustAppend(t, s, recs("a"))
			mustAppend(t, s, recs("b", "c"))
			mustAppend(t, s, nil)
			mustAppend(t, s, recs("d", "e", "f"))
			checkLoad(t, s, store.Contents{Records: recs("a", "b", "c", "d", "e", "f")})
		}},
		{"snapshot drops the records before it", func(t *testing.T, s Journal, _ Reopen) {
			mustAppend(t, s, recs("a", "b"))
			mustSnapshot(t, s, "s1")
			checkLoad(t, s, store.Contents{Snapshot: []byte("s1"), Records: [][]byte{}})
			mustAppend(t, s, recs("c"))
			mustAppend(t, s, recs("d"))
			checkLoad(t, s, store.Contents{Snapshot: []byte("s1"), Records: recs("c", "d")})
			mustSnapshot(t, s, "s2")
			mustSnapshot(t, s, "s3")
			mustAppend(t, s, recs("e"))
			checkLoad(t, s, store.Contents{Snapshot: []byte("s3"), Records: recs("e")})
		}},
		{"empty records and snapshots load as nil", func(t *testing.T, s Journal, _ Reopen) {
			mustAppend(t, s, [][]byte{{}, nil})
			checkLoad(t, s, store.Contents{Records: [][]byte{nil, nil}})
			mustSnapshot(t, s, "")
			checkLoad(t, s, store.Contents{Records: [][]byte{}})
		}},
		{"copies are not aliased", func(t *testing.T, s Journal, _ Reopen) {
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
			checkLoad(t, s, store.Contents{Snapshot: []byte("state"), Records: recs("rec")})
		}},
		{"a closed store fails", func(t *testing.T, s Journal, _ Reopen) {
			mustAppend(t, s, recs("a"))
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := s.Append(ctx, recs("b")); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Append after Close = %v, want store.ErrClosed", err)
			}
			if err := s.Snapshot(ctx, nil); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Snapshot after Close = %v, want store.ErrClosed", err)
			}
			if _, err := s.Load(ctx); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Load after Close = %v, want store.ErrClosed", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close = %v, want nil", err)
			}
		}},
		{"a reopened store keeps everything", func(t *testing.T, s Journal, reopen Reopen) {
			mustAppend(t, s, recs("a", "b"))
			s = reopen(t, s)
			checkLoad(t, s, store.Contents{Records: recs("a", "b")})
			mustSnapshot(t, s, "s1")
			s = reopen(t, s)
			checkLoad(t, s, store.Contents{Snapshot: []byte("s1"), Records: [][]byte{}})
			mustAppend(t, s, recs("c"))
			s = reopen(t, s)
			mustAppend(t, s, recs("d", "e"))
			s = reopen(t, s)
			checkLoad(t, s, store.Contents{Snapshot: []byte("s1"), Records: recs("c", "d", "e")})
		}},
		{"concurrent loads see whole groups", func(t *testing.T, s Journal, _ Reopen) {
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
						errs <- fmt.Errorf("a Load saw %d records, not whole groups of %d", len(c.Records), size)
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, reopen := open(t)
			tt.run(t, s, reopen)
		})
	}
}
