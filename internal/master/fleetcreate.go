package master

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/platform"
)

// createWorkers bounds the node creates a fleet has in flight at once. A
// create is one API request on Kubernetes (a few milliseconds of round
// trip) and a process start locally: a handful overlapping hides the round
// trip, the way a burst of pod failures needs, without a thousand-node job
// flooding its platform; the master's client limits on API requests
// (kubemaster.ClientConfig) still apply to every one.
const createWorkers = 16

// creates carries out a batch of the node manager's CreateNode commands,
// at most createWorkers at a time. Only the platform calls overlap: the
// manager decided the batch before any of it runs, the fleet's loop waits
// for the whole batch (wait), and the creates the platform refused are
// reported back in the order they were decided, so the manager sees the
// same events whatever order the calls finish in.
type creates struct {
	f     *fleet
	ctx   context.Context
	slots chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	failed  []createFailure // index order: the command's place in the batch
	skipped int
}

// createFailure is a create the platform refused.
type createFailure struct {
	index int
	id    string
	err   error
}

func newCreates(ctx context.Context, f *fleet) *creates {
	return &creates{f: f, ctx: ctx, slots: make(chan struct{}, createWorkers)}
}

// start creates c's node in the background once a worker is free; index
// is c's place in the batch. A create that a worker takes up once the job
// is over or ctx has ended starts nothing: a thousand nodes take a while
// to start.
func (cs *creates) start(index int, c nodemanager.Command) {
	cs.slots <- struct{}{}
	cs.wg.Go(func() {
		defer func() { <-cs.slots }()
		if cs.ctx.Err() != nil || cs.f.ended() {
			cs.mu.Lock()
			cs.skipped++
			cs.mu.Unlock()
			return
		}
		cs.f.log.Info("node manager: "+c.Kind.String(), "node", c.NodeID, "reason", c.Reason)
		cs.f.hold(c.NodeID)
		if err := cs.f.cfg.Platform.Create(cs.ctx, c.Spec); err != nil {
			cs.mu.Lock()
			cs.failed = append(cs.failed, createFailure{index: index, id: c.NodeID, err: err})
			cs.mu.Unlock()
		}
	})
}

// wait waits for every create started, then reports each the platform
// refused as its node's failure, in the batch's order, for the manager to
// relaunch or give up on. It returns how many creates were skipped.
func (cs *creates) wait() int {
	cs.wg.Wait()
	cs.mu.Lock()
	failed, skipped := cs.failed, cs.skipped
	cs.failed, cs.skipped = nil, 0
	cs.mu.Unlock()
	slices.SortFunc(failed, func(a, b createFailure) int { return cmp.Compare(a.index, b.index) })
	for _, fl := range failed {
		cs.f.log.Error("create a node", "node", fl.id, "err", fl.err)
		cs.f.enqueue(platform.Event{NodeID: fl.id, Kind: platform.Exited, ExitCode: 127,
			Reason: fmt.Sprintf("the platform could not create it: %v", fl.err), Time: cs.f.clock.Now()})
	}
	return skipped
}
