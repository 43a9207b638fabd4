package master

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/platform"
)

// gatedPlatform holds each Create until the test lets it through, the way
// a slow platform (a thousand agents starting on one machine) does.
type gatedPlatform struct {
	platform.Platform
	entered chan string   // a Create has begun
	release chan struct{} // lets one Create through
}

func (g *gatedPlatform) Create(ctx context.Context, spec platform.NodeSpec) error {
	g.entered <- spec.ID
	<-g.release
	return g.Platform.Create(ctx, spec)
}

// TestCancelStopsNodeCreation: a job cancelled while its 120 nodes are
// being created starts no more of them: only the creates already in
// flight when the cancel came (at most createWorkers) go through, and
// those nodes are deleted when the master stops.
func TestCancelStopsNodeCreation(t *testing.T) {
	const nodes = 120
	spec := nodemanager.Spec{Job: "train", Groups: []nodemanager.GroupSpec{{
		MinNodes: nodes, MaxNodes: nodes, Argv: []string{"rover", "run", "train.py"},
	}}}
	fake := newFake()
	gate := &gatedPlatform{Platform: fake, entered: make(chan string), release: make(chan struct{})}
	fm := startFleet(t, fleetOptions{spec: spec, platform: gate, rdzv: rdzvConfig(nodes, nodes)})

	first := <-gate.entered
	cancelled := make(chan error, 1)
	go func() { cancelled <- fm.m.Cancel(context.Background(), "stopped by its user") }()
	if err := <-cancelled; err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	close(gate.release) // the Creates in flight finish; any later one passes at once
	go func() {
		for range gate.entered {
		}
	}()
	if err := fm.stop(); err != nil { // rover submit stopping its master
		t.Fatalf("master Run: %v", err)
	}
	got := createdIDs(fake)
	if len(got) > createWorkers || !slices.Contains(got, first) {
		t.Errorf("created %d nodes (%v), want %s and at most the %d being created when the job was cancelled", len(got), got, first, createWorkers)
	}
	for _, id := range got {
		waitDeleted(t, fake, id)
	}
}

// overlapPlatform holds every Create until release is closed, counting
// those in flight at once.
type overlapPlatform struct {
	platform.Platform
	mu       sync.Mutex
	inFlight int
	most     int
	release  chan struct{}
}

func (o *overlapPlatform) Create(ctx context.Context, spec platform.NodeSpec) error {
	o.mu.Lock()
	o.inFlight++
	o.most = max(o.most, o.inFlight)
	o.mu.Unlock()
	<-o.release
	o.mu.Lock()
	o.inFlight--
	o.mu.Unlock()
	return o.Platform.Create(ctx, spec)
}

func (o *overlapPlatform) counts() (inFlight, most int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.inFlight, o.most
}

// TestFleetOverlapsCreates: the nodes of one decision are created
// concurrently, createWorkers at a time and never more, and all of them
// are made.
func TestFleetOverlapsCreates(t *testing.T) {
	const nodes = 40
	spec := nodemanager.Spec{Job: "train", Groups: []nodemanager.GroupSpec{{
		MinNodes: nodes, MaxNodes: nodes, Argv: []string{"rover", "run", "train.py"},
	}}}
	fake := newFake()
	slow := &overlapPlatform{Platform: fake, release: make(chan struct{})}
	startFleet(t, fleetOptions{spec: spec, platform: slow, rdzv: rdzvConfig(nodes, nodes)})
	waitFor(t, fmt.Sprintf("%d creates in flight at once", createWorkers), func() bool {
		in, _ := slow.counts()
		return in == createWorkers
	})
	close(slow.release)
	var ids []string
	for r := range nodes {
		ids = append(ids, fmt.Sprintf("train-worker-%d-0", r))
	}
	waitCreated(t, fake, ids...)
	if _, most := slow.counts(); most != createWorkers {
		t.Errorf("at most %d creates were in flight at once, want %d", most, createWorkers)
	}
}
