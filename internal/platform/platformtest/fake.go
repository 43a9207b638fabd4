// Package platformtest provides [Fake], an in-memory [platform.Platform] for
// other packages' unit tests. It runs nothing: Create records the spec and
// reports Pending; tests then drive nodes with [Fake.Start], [Fake.Exit] and
// [Fake.Evict], and read back what the code under test asked for with
// [Fake.Created] and [Fake.Deleted].
//
// It keeps the platform contract: Create of a held id fails with
// platform.ErrExists, Delete is idempotent, events of one node are in order,
// and Watch first replays the current state of every held node.
package platformtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/roverml/rover/internal/platform"
)

// Fake is an in-memory platform. The zero value is not usable; call [New].
type Fake struct {
	now  func() time.Time
	caps platform.Capabilities

	mu        sync.Mutex
	nodes     map[string]*fakeNode // held nodes (not yet deleted)
	log       []platform.Event     // every event, in order
	created   []platform.NodeSpec
	deleted   []string
	createErr error
	wake      chan struct{} // closed and replaced when log grows
}

type fakeNode struct {
	spec platform.NodeSpec
	seq  int            // creation order
	last platform.Event // latest event
}

var _ platform.Platform = (*Fake)(nil)

// New returns a fake that stamps events with now() and reports caps.
func New(now func() time.Time, caps platform.Capabilities) *Fake {
	return &Fake{now: now, caps: caps, nodes: make(map[string]*fakeNode), wake: make(chan struct{})}
}

// Capabilities returns the capabilities given to [New].
func (f *Fake) Capabilities() platform.Capabilities { return f.caps }

// FailCreates makes every later Create return err (nil: succeed again).
func (f *Fake) FailCreates(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.createErr = err
}

// Create records spec and reports the node Pending.
func (f *Fake) Create(ctx context.Context, spec platform.NodeSpec) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("create node %q: %w", spec.ID, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return fmt.Errorf("create node %q: %w", spec.ID, f.createErr)
	}
	if _, ok := f.nodes[spec.ID]; ok || slices.Contains(f.deleted, spec.ID) {
		return fmt.Errorf("create node %q: %w", spec.ID, platform.ErrExists)
	}
	f.nodes[spec.ID] = &fakeNode{spec: spec, seq: len(f.created)}
	f.created = append(f.created, spec)
	f.emitLocked(platform.Event{NodeID: spec.ID, Kind: platform.Pending})
	return nil
}

// Delete removes a held node and reports it Deleted; unknown ids are a no-op.
func (f *Fake) Delete(ctx context.Context, nodeID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeLocked(nodeID, "")
	return nil
}

// Watch replays the state of every held node, then Synced, then every
// later event, until ctx ends.
func (f *Fake) Watch(ctx context.Context, fn func(platform.Event)) error {
	f.mu.Lock()
	held := make([]fakeNode, 0, len(f.nodes)) // copies: n.last changes under f.mu
	for _, n := range f.nodes {
		held = append(held, *n)
	}
	next := len(f.log)
	f.mu.Unlock()
	slices.SortFunc(held, func(a, b fakeNode) int { return a.seq - b.seq })
	for _, n := range held {
		fn(n.last)
	}
	fn(platform.Event{Kind: platform.Synced})
	for {
		f.mu.Lock()
		evs, wake := f.log[next:], f.wake
		next = len(f.log)
		f.mu.Unlock()
		for _, ev := range evs {
			fn(ev)
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// Start reports a held node Running on host.
func (f *Fake) Start(nodeID, host string) error {
	return f.emit(platform.Event{NodeID: nodeID, Kind: platform.Running, Host: host})
}

// Exit reports a held node Exited with code, signal and reason, on the host
// of its last event.
func (f *Fake) Exit(nodeID string, code, signal int, reason string) error {
	return f.emit(platform.Event{NodeID: nodeID, Kind: platform.Exited, ExitCode: code, Signal: signal, Reason: reason})
}

// Evict removes a held node as the platform would on its own (eviction,
// preemption, an operator's delete) and reports it Deleted with reason.
func (f *Fake) Evict(nodeID, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodes[nodeID] == nil {
		return fmt.Errorf("evict node %q: not held", nodeID)
	}
	f.removeLocked(nodeID, reason)
	return nil
}

func (f *Fake) emit(ev platform.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[ev.NodeID]
	if n == nil {
		return fmt.Errorf("%s node %q: not held", ev.Kind, ev.NodeID)
	}
	if ev.Host == "" {
		ev.Host = n.last.Host
	}
	f.emitLocked(ev)
	return nil
}

func (f *Fake) removeLocked(nodeID, reason string) {
	n := f.nodes[nodeID]
	if n == nil {
		return
	}
	f.emitLocked(platform.Event{NodeID: nodeID, Kind: platform.Deleted, Reason: reason, Host: n.last.Host})
	delete(f.nodes, nodeID)
	f.deleted = append(f.deleted, nodeID)
}

func (f *Fake) emitLocked(ev platform.Event) {
	ev.Time = f.now()
	if n := f.nodes[ev.NodeID]; n != nil {
		n.last = ev
	}
	f.log = append(f.log, ev)
	close(f.wake)
	f.wake = make(chan struct{})
}

// Created returns every spec given to a successful Create, in order.
func (f *Fake) Created() []platform.NodeSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created)
}

// Deleted returns the id of every node removed, by Delete or Evict, in order.
func (f *Fake) Deleted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deleted)
}

// Held returns the ids of the nodes the platform holds now, in creation order.
func (f *Fake) Held() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := make([]*fakeNode, 0, len(f.nodes))
	for _, n := range f.nodes {
		held = append(held, n)
	}
	slices.SortFunc(held, func(a, b *fakeNode) int { return a.seq - b.seq })
	ids := make([]string, len(held))
	for i, n := range held {
		ids[i] = n.spec.ID
	}
	return ids
}

// Events returns every event reported so far, in order.
func (f *Fake) Events() []platform.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}
