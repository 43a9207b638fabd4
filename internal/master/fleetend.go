package master

import (
	"context"
	"time"

	"github.com/roverml/rover/internal/nodemanager"
)

// How the fleet ends: once the job is over, or when the master stops.

// drain waits, once the job has ended, for its nodes to exit on their own
// (their agents learn the outcome and stop their workers), at most
// ExitGrace or until ctx ends, then deletes every node. The manager records
// how the nodes end, and relaunches none.
func (f *fleet) drain(ctx context.Context) {
	f.log.Info("the job ended: waiting for its nodes to exit", "grace", f.cfg.ExitGrace)
	f.mgr.End()
	f.carry(ctx, nil)
	joined := map[string]bool{}
	for _, n := range f.core.job().GetNodes() {
		joined[n.GetNodeId()] = true
	}
	agentless := map[string]bool{}
	for _, g := range f.cfg.Spec.Groups {
		agentless[g.Name] = g.Agentless
	}
	for _, n := range f.mgr.Status().Nodes {
		if agentless[n.Group] && (n.State == nodemanager.Pending || n.State == nodemanager.Running) {
			// No agent: it learns nothing of the outcome (a PS serves
			// until it is stopped).
			f.delete(n.NodeID)
			continue
		}
		if n.State == nodemanager.Pending && !joined[n.NodeID] {
			// Never placed (beyond the platform's capacity), or its agent
			// never joined: none learns the outcome; nothing to wait for.
			f.delete(n.NodeID)
		}
	}
	record := func() {
		var cmds []nodemanager.Command
		for _, ev := range f.take() {
			cmds = append(cmds, f.mgr.Observe(ev, f.clock.Now())...)
		}
		f.carry(ctx, cmds)
	}
	deadline := time.NewTimer(f.cfg.ExitGrace)
	defer deadline.Stop()
	for waiting := true; waiting && !f.allExited(); {
		select {
		case <-ctx.Done():
			waiting = false
		case <-deadline.C:
			waiting = false
		case <-f.wake:
			record()
		}
	}
	f.deleteAll()
	record()
	f.deletes.Wait()
}

// stop deletes every node at once, the master's context having ended: the
// manager records how they end and relaunches none.
func (f *fleet) stop() {
	ctx := context.Background() // the journal still takes what happens
	f.mgr.End()
	f.carry(ctx, nil)
	f.deleteAll()
	var cmds []nodemanager.Command
	for _, ev := range f.take() {
		cmds = append(cmds, f.mgr.Observe(ev, f.clock.Now())...)
	}
	f.carry(ctx, cmds)
	f.deletes.Wait()
}

func (f *fleet) allExited() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, exited := range f.held {
		if !exited {
			return false
		}
	}
	return true
}

// deleteAll deletes every node the platform holds and waits for the deletes.
func (f *fleet) deleteAll() {
	f.mu.Lock()
	ids := make([]string, 0, len(f.held))
	for id := range f.held {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	for _, id := range ids {
		f.delete(id)
	}
	f.deletes.Wait()
	if f.mgr != nil {
		f.core.setFleetView(f.mgr.Status(), f.cfg.Name)
	}
}
