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
	if err := s.Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec[0] = 'x' // the store must have copied it
	if err := s.Append(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]byte{[]byte("a"), []byte("b")}, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, rec); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
}
