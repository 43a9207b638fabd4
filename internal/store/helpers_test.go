package store

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// journal is what the helpers need of a backend.
type journal interface {
	Append(ctx context.Context, recs [][]byte) error
	Snapshot(ctx context.Context, state []byte) error
	Load(ctx context.Context) (Contents, error)
	Close() error
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
