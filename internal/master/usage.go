package master

import (
	"sync"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/nodemanager"
)

// usageBox carries what the nodes' workers use from their heartbeats to
// the fleet, for right-sizing (docs/design/node-manager.md): the newest
// report per node, coalesced, so that heartbeats every second from every
// node cost a map write and at most one wake of the fleet's loop. Nothing
// here is journaled: the manager's record goes into the journal with its
// next state change. It has its own lock, not the core's, so the fleet
// never waits on a commit to take it.
type usageBox struct {
	mu    sync.Mutex
	nodes map[string]nodemanager.Usage
	ready chan struct{} // size one: reports are waiting
}

func newUsageBox() *usageBox { return &usageBox{ready: make(chan struct{}, 1)} }

// put records node's newest usage; a nil u is ignored.
func (b *usageBox) put(node string, u *roverv1.NodeUsage) {
	if u == nil {
		return
	}
	b.mu.Lock()
	if b.nodes == nil {
		b.nodes = map[string]nodemanager.Usage{}
	}
	b.nodes[node] = nodemanager.Usage{ResidentBytes: u.GetResidentBytes(), PeakResidentBytes: u.GetPeakResidentBytes(), CPUCores: u.GetCpuCores()}
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take returns the reports since the last take and empties the box.
func (b *usageBox) take() map[string]nodemanager.Usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.nodes
	b.nodes = nil
	return out
}
