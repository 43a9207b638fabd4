package agent

import (
	"sync"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Node events (docs/design/goodput.md): the moments of the node's workers'
// lifecycle that the master's goodput accounting needs, in the agent's
// clock, queued until a heartbeat carries them (Heartbeat.events).

const (
	// maxEventsPerBeat is the most events one heartbeat carries; a longer
	// queue goes out on the next beats at once.
	maxEventsPerBeat = 64
	// eventQueueLimit bounds the events held while the master is
	// unreachable: past it the oldest are dropped (and counted).
	eventQueueLimit = 1024
)

// eventQueue holds the node's events, oldest first, until a heartbeat
// takes them. It is bounded: when the master is away longer than the queue
// lasts, the oldest events are dropped and counted.
type eventQueue struct {
	mu      sync.Mutex
	events  []*roverv1.NodeEvent
	limit   int
	dropped int64 // events dropped since the queue was made
	// ready is signalled (size one) when an urgent event waits: the
	// session sends a heartbeat at once rather than at its next tick.
	ready chan struct{}
}

func newEventQueue(limit int) *eventQueue {
	return &eventQueue{limit: limit, ready: make(chan struct{}, 1)}
}

// add queues e, dropping the oldest event when the queue is full. A
// moment of the workers' start or restore is urgent: it signals ready, for
// a heartbeat at once. Checkpoint saves (one a save, at the save rate) are
// not: they carry their own time and go on the next beat that carries
// progress (at most one a second), or a regular one.
func (q *eventQueue) add(e *roverv1.NodeEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.events = append(q.events, e)
	q.trimLocked()
	if e.GetKind() != roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED {
		q.signalLocked()
	}
}

// urge makes what waits go out at once (the workers' group ended: their
// last saves are the master's best account of their last steps, and the
// group's outcome follows).
func (q *eventQueue) urge() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.events) > 0 {
		q.signalLocked()
	}
}

// pending reports whether events wait.
func (q *eventQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.events) > 0
}

// take removes and returns up to n of the oldest events; nil when none
// wait. Events left behind keep the queue ready.
func (q *eventQueue) take(n int) []*roverv1.NodeEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := min(n, len(q.events))
	if k == 0 {
		return nil
	}
	out := make([]*roverv1.NodeEvent, k)
	copy(out, q.events)
	q.events = append(q.events[:0:0], q.events[k:]...)
	if len(q.events) > 0 {
		q.signalLocked()
	}
	return out
}

// putBack returns events a heartbeat could not send to the front of the
// queue, in their order, dropping the oldest past the limit.
func (q *eventQueue) putBack(events []*roverv1.NodeEvent) {
	if len(events) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.events = append(append(make([]*roverv1.NodeEvent, 0, len(events)+len(q.events)), events...), q.events...)
	q.trimLocked()
	q.signalLocked()
}

// droppedCount is how many events the queue dropped in all.
func (q *eventQueue) droppedCount() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

func (q *eventQueue) trimLocked() {
	if over := len(q.events) - q.limit; over > 0 {
		q.dropped += int64(over)
		q.events = append(q.events[:0:0], q.events[over:]...)
	}
}

func (q *eventQueue) signalLocked() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
