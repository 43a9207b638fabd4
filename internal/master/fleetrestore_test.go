package master

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/store"
)

// The fleet tests of a master that restarts (from its journal, or after
// its platform changed while it was away) and of how the job ends with
// its nodes (fleet_test.go has the helpers).

// crashable passes calls through to a platform until crash: then it deletes
// nothing, as the platform would see it of a master killed outright.
type crashable struct {
	platform.Platform
	crashed atomic.Bool
}

func (p *crashable) Delete(ctx context.Context, id string) error {
	if p.crashed.Load() {
		return nil
	}
	return p.Platform.Delete(ctx, id)
}

// TestFleetRestoresFromJournal: a master restarted on the same store takes
// over the nodes the platform still holds, creating none, with the
// relaunches counted so far, and goes on relaunching where it left off.
func TestFleetRestoresFromJournal(t *testing.T) {
	fake := newFake()
	st := store.NewMemory()
	first := &crashable{Platform: fake}
	fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: first, store: st, keepNodes: true})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	if err := fake.Start("train-worker-1-0", "host-b"); err != nil {
		t.Fatal(err)
	}
	if err := fake.Exit("train-worker-0-0", 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-0-1")
	waitDeleted(t, fake, "train-worker-0-0")
	first.crashed.Store(true)
	if err := fm.stop(); err != nil {
		t.Fatal(err)
	}
	if held := heldIDs(fake); !slices.Equal(held, []string{"train-worker-0-1", "train-worker-1-0"}) {
		t.Fatalf("the platform holds %v after the crash, want the live nodes", held)
	}

	fm = startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake, store: st})
	waitFor(t, "the restored node manager in GetJob", func() bool { return len(fm.job(t).GetManagedNodes()) == 2 })
	r := fm.job(t)
	if r.GetRelaunches() != 1 || managed(t, r, 0).GetNodeId() != "train-worker-0-1" || managed(t, r, 0).GetRelaunches() != 1 {
		t.Errorf("restored: %d relaunches, managed nodes %v; want 1, rank 0 on train-worker-0-1", r.GetRelaunches(), r.GetManagedNodes())
	}
	wantCauses(t, r, map[string]int32{"exited": 1})
	// The next failure is answered by the restored manager, after the
	// platform's replay: had the restart created nodes, they would come first.
	if err := fake.Exit("train-worker-1-0", 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-0-1", "train-worker-1-1")
	r = fm.job(t)
	if r.GetRelaunches() != 2 {
		t.Errorf("%d relaunches after the restart's first, want 2", r.GetRelaunches())
	}
	wantCauses(t, r, map[string]int32{"exited": 2})
}

// wantCauses checks GetJob's relaunches by cause.
func wantCauses(t *testing.T, r *roverv1.GetJobResponse, want map[string]int32) {
	t.Helper()
	if got := r.GetRelaunchCauses(); !maps.Equal(got, want) {
		t.Errorf("relaunches by cause %v, want %v", got, want)
	}
}

// lateWatch delays the platform's events until release is closed: the
// master hears of the nodes it created only later, as from a slow watch.
type lateWatch struct {
	platform.Platform
	release chan struct{}
}

func (p *lateWatch) Watch(ctx context.Context, fn func(platform.Event)) error {
	return p.Platform.Watch(ctx, func(ev platform.Event) {
		select {
		case <-p.release:
			fn(ev)
		case <-ctx.Done():
		}
	})
}

// TestFleetCancelDeletesNodes: when Run's context ends, every node is
// deleted before Run returns, including those the platform has not yet
// reported.
func TestFleetCancelDeletesNodes(t *testing.T) {
	for _, reported := range []bool{true, false} {
		t.Run(fmt.Sprintf("reported=%v", reported), func(t *testing.T) {
			fake := newFake()
			p := &lateWatch{Platform: fake, release: make(chan struct{})}
			if reported {
				close(p.release)
			}
			fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: p})
			waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
			if reported {
				if err := fake.Start("train-worker-0-0", "host-a"); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "node 0 running", func() bool { return managed(t, fm.job(t), 0).GetState() == "Running" })
			}
			if err := fm.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if held := fake.Held(); len(held) != 0 {
				t.Errorf("the platform holds %v after Run returned", held)
			}
			if d := fake.Deleted(); len(d) != 2 {
				t.Errorf("deleted %v, want both nodes", d)
			}
			select {
			case <-fm.m.NodesGone():
			default:
				t.Error("NodesGone not closed after Run returned")
			}
		})
	}
}

// TestFleetKeepNodes: a master told to keep its nodes (Kubernetes, where the
// master's pod is replaced and the workers' stay) deletes none when its
// context ends before the job does.
func TestFleetKeepNodes(t *testing.T) {
	fake := newFake()
	fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake, keepNodes: true})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	if err := fm.stop(); err != nil {
		t.Fatal(err)
	}
	if d := fake.Deleted(); len(d) > 0 {
		t.Errorf("a master keeping its nodes deleted %v when it stopped", d)
	}
	if held := heldIDs(fake); !slices.Equal(held, []string{"train-worker-0-0", "train-worker-1-0"}) {
		t.Errorf("the platform holds %v after the master stopped, want both nodes", held)
	}
}

// TestFleetReplacesNodesGoneWhileAway: a node that disappeared while the
// master was down (deleted, its machine rebooted) is missing from the
// platform's first report to the restarted master, which replaces it; the
// node still there is adopted as it is.
func TestFleetReplacesNodesGoneWhileAway(t *testing.T) {
	fake := newFake()
	st := store.NewMemory()
	fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake, store: st, keepNodes: true})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	if err := fm.stop(); err != nil {
		t.Fatal(err)
	}
	if err := fake.Delete(context.Background(), "train-worker-1-0"); err != nil {
		t.Fatal(err)
	}
	fm = startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake, store: st})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-1-1")
	r := fm.job(t)
	if n := managed(t, r, 1); n.GetNodeId() != "train-worker-1-1" || !strings.Contains(n.GetLastExit(), "gone while the master was away") {
		t.Errorf("managed rank 1: %v, want its replacement, saying the node was gone", n)
	}
	if n := managed(t, r, 0); n.GetNodeId() != "train-worker-0-0" || n.GetRelaunches() != 0 {
		t.Errorf("managed rank 0: %v, want train-worker-0-0 adopted", n)
	}
}
