package master

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/store"
)

// TestStoreFailureEndsTheMaster: once the store refuses a write, the master
// stops at once without anyone cancelling it: Run returns the cause wrapped
// in ErrStoreFailed, the port closes, and WaitFinished, which a caller waits
// in for the job's outcome, returns the same error rather than waiting for
// an outcome that can no longer come.
func TestStoreFailureEndsTheMaster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &gatedStore{Memory: store.NewMemory()}
	preset := configwire.FromProto(rdzvConfig(1, 1))
	m, err := New(ctx, Config{Listen: "127.0.0.1:0", Token: testToken, Store: st, Preset: &preset})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	waited := make(chan error, 1)
	go func() { _, err := m.WaitFinished(ctx); waited <- err }()

	st.mu.Lock()
	st.fail = syscall.ENOSPC
	st.mu.Unlock()
	if err := m.Cancel(ctx, "stopped by a test"); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("Cancel = %v, want the store's ENOSPC wrapped in ErrStoreFailed", err)
	}
	deadline := time.After(30 * time.Second) // only turns a hang into a failure
	for _, c := range []struct {
		name string
		ch   chan error
	}{{"WaitFinished", waited}, {"Run", ran}} {
		select {
		case err := <-c.ch:
			if !errors.Is(err, ErrStoreFailed) || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("%s = %v, want the store's ENOSPC wrapped in ErrStoreFailed", c.name, err)
			}
		case <-deadline:
			t.Fatalf("%s did not return after the store failed (its context is still live)", c.name)
		}
	}
	if conn, err := net.Dial("tcp", m.Addr()); err == nil {
		conn.Close()
		t.Errorf("the master's port %s still accepts connections after Run returned", m.Addr())
	}
	// A later wait answers at once, with the same cause.
	if _, err := m.WaitFinished(context.Background()); !errors.Is(err, ErrStoreFailed) {
		t.Errorf("WaitFinished after Run returned = %v, want ErrStoreFailed", err)
	}
}

// TestWaitFinishedEndsWithRun: a master whose Run returned for another
// reason (its context ended) cannot finish the job either: WaitFinished
// says so rather than block.
func TestWaitFinishedEndsWithRun(t *testing.T) {
	m, err := New(context.Background(), Config{Listen: "127.0.0.1:0", Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if _, err := m.WaitFinished(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("WaitFinished after Run returned = %v, want ErrStopped", err)
	}
}
