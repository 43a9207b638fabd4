package master

import (
	"sync"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/nodemanager"
)

// usageBox carries what the nodes' workers use from their heartbeats to
// the fleet, for right-sizing (docs/design/node-manager.md): the reports
// per node since the fleet last took them, at most boxReports (the oldest
// dropped), so that heartbeats every second from every node cost an
// append and at most one wake of the fleet's loop, and the step times the
// CPU rule compares are not lost while the fleet is busy. Nothing here is
// journaled: the manager's record goes into the journal with its next
// state change. It has its own lock, not the core's, so the fleet never
// waits on a commit to take it.
type usageBox struct {
	mu    sync.Mutex
	nodes map[string][]nodemanager.Usage
	ready chan struct{} // size one: reports are waiting
}

// boxReports bounds the reports a node keeps in the box: two step-time
// windows of the node manager's.
const boxReports = 10

func newUsageBox() *usageBox { return &usageBox{ready: make(chan struct{}, 1)} }

// put records node's usage from its heartbeat's progress, with the node's
// seconds per step (its slowest worker's) for the CPU rule; a progress
// without usage is ignored.
func (b *usageBox) put(node string, np *roverv1.NodeProgress) {
	u := np.GetUsage()
	if u == nil {
		return
	}
	var step float64
	for _, w := range np.GetWorkers() {
		if k := w.GetSteps(); k > 0 && w.GetWallSeconds() > 0 {
			step = max(step, w.GetWallSeconds()/float64(k))
		}
	}
	b.mu.Lock()
	if b.nodes == nil {
		b.nodes = map[string][]nodemanager.Usage{}
	}
	rs := b.nodes[node]
	if len(rs) == boxReports {
		rs = append(rs[:0], rs[1:]...)
	}
	b.nodes[node] = append(rs, nodemanager.Usage{ResidentBytes: u.GetResidentBytes(), PeakResidentBytes: u.GetPeakResidentBytes(),
		CPUCores: u.GetCpuCores(), StepSeconds: step, Round: np.GetRound()})
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take returns the reports since the last take, oldest first per node,
// and empties the box.
func (b *usageBox) take() map[string][]nodemanager.Usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.nodes
	b.nodes = nil
	return out
}

// observeUsage feeds the manager the workers' usage the heartbeats
// carried. It changes only the manager's right-sizing record: nothing is
// journaled or carried out now; the record is journaled with the next
// change of the manager's state.
func (f *fleet) observeUsage() {
	now := f.clock.Now()
	taken := f.core.usage.take()
	for id, us := range taken {
		for _, u := range us {
			f.mgr.ObserveUsage(id, u, now)
		}
	}
	if len(taken) > 0 {
		f.core.setFleetView(f.mgr.Status(), f.cfg.Name) // rover status shows the usage
	}
}
