package store

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMemoryJournal(t *testing.T) {
	ctx := context.Background()
	s := NewMemory()
	rec := []byte("a")
	if err := s.Append(ctx, [][]byte{rec}); err != nil {
		t.Fatal(err)
	}
	rec[0] = 'x' // the store must have copied it
	if err := s.Append(ctx, [][]byte{[]byte("b")}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Contents{Records: [][]byte{[]byte("a"), []byte("b")}}, got); diff != "" {
		t.Errorf("contents (-want +got):\n%s", diff)
	}
	if err := s.Snapshot(ctx, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, [][]byte{[]byte("c")}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Load(ctx)
	if diff := cmp.Diff(Contents{Snapshot: []byte("state"), Records: [][]byte{[]byte("c")}}, got); diff != "" {
		t.Errorf("contents after a snapshot (-want +got):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, [][]byte{rec}); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
}
