package platformtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/platform"
)

func spec(id string) platform.NodeSpec {
	return platform.NodeSpec{Job: "train", Group: "worker", ID: id, Argv: []string{"rover"}}
}

func TestFakeContract(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := New(func() time.Time { return now }, platform.Capabilities{Hosts: true})
	ctx := context.Background()
	if err := f.Create(ctx, spec("a")); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx, spec("a")); !errors.Is(err, platform.ErrExists) {
		t.Fatalf("second Create = %v, want ErrExists", err)
	}
	if err := f.Create(ctx, spec("B")); !errors.Is(err, platform.ErrInvalidSpec) {
		t.Fatalf("Create(B) = %v, want ErrInvalidSpec", err)
	}
	if err := f.Start("a", "h1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx, spec("b")); err != nil {
		t.Fatal(err)
	}

	// Watch first replays the state of held nodes, then follows.
	got := make(chan platform.Event)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Watch(ctx, func(ev platform.Event) { got <- ev }) }()
	next := func() string { ev := <-got; return ev.NodeID + " " + ev.Kind.String() + " " + ev.Host }
	var seen []string
	seen = append(seen, next(), next(), next())
	if err := f.Exit("a", 1, 0, "Error"); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, next())
	if err := f.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, next())
	if err := f.Evict("b", "Evicted"); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, next())
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v", err)
	}
	want := []string{"a Running h1", "b Pending ", " Synced ", "a Exited h1", "a Deleted h1", "b Deleted "}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if err := f.Delete(context.Background(), "a"); err != nil {
		t.Fatalf("repeated Delete = %v", err)
	}
	if err := f.Create(context.Background(), spec("a")); !errors.Is(err, platform.ErrExists) {
		t.Fatalf("Create of a deleted id = %v, want ErrExists (ids are never reused)", err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, f.Deleted()); diff != "" {
		t.Errorf("Deleted (-want +got):\n%s", diff)
	}
	if len(f.Held()) != 0 || len(f.Created()) != 2 {
		t.Errorf("Held %v, Created %d", f.Held(), len(f.Created()))
	}
	f.FailCreates(errors.New("quota"))
	if err := f.Create(context.Background(), spec("c")); err == nil {
		t.Fatal("Create succeeded while failing")
	}
}
