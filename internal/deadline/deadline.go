// Package deadline keeps things that expire in the order of their
// deadlines: a min-heap in which each item knows its place, so that moving
// an item's deadline or removing it costs O(log n), finding the earliest
// O(1), and popping k expired items O(k log n). The node table's liveness
// deadlines and the shard machine's lease deadlines are kept in one.
//
// An item embeds a Slot, which holds its deadline and its place; the queue
// holds pointers to items. It reads no clock: callers say what now is.
//
//	type lease struct {
//		deadline.Slot
//		id uint64
//	}
//	var q deadline.Queue[*lease]
//	q.Set(l, now.Add(timeout))
//	for l, ok := q.PopDue(now); ok; l, ok = q.PopDue(now) {
//		expire(l)
//	}
//
// A Queue is not safe for concurrent use.
package deadline

import (
	"container/heap"
	"time"
)

// Slot is what an item embeds to be kept in a Queue: its deadline and its
// place there. The zero Slot is in no queue.
type Slot struct {
	at  time.Time
	pos int // 1 + the item's index in its queue's heap; 0 when in none
}

// Deadline returns the deadline the item was last queued with; the zero
// time when it never was.
func (s *Slot) Deadline() time.Time { return s.at }

// Queued reports whether the item is in a queue.
func (s *Slot) Queued() bool { return s.pos > 0 }

func (s *Slot) slot() *Slot { return s }

// Item is a pointer to a type that embeds Slot.
type Item interface {
	slot() *Slot
}

// Queue orders items by deadline, earliest first; items with equal
// deadlines come out in an order that depends only on the calls made. The
// zero Queue is empty and ready to use.
type Queue[T Item] struct {
	h items[T]
}

// Set queues x with deadline at, or moves it there when it is queued
// already. x must be in no other queue.
func (q *Queue[T]) Set(x T, at time.Time) {
	s := x.slot()
	s.at = at
	h := q.heap()
	if s.pos > 0 {
		h.list[s.pos-1].at = at
		heap.Fix(h, s.pos-1)
		return
	}
	// heap.Push, without boxing the entry: on the last index, Fix moves
	// it up as Push would.
	h.list = append(h.list, entry[T]{at: at, slot: s, item: x})
	s.pos = len(h.list)
	heap.Fix(h, len(h.list)-1)
}

// Remove takes x out of the queue; it does nothing when x is not queued.
func (q *Queue[T]) Remove(x T) {
	if s := x.slot(); s.pos > 0 {
		heap.Remove(q.heap(), s.pos-1)
	}
}

// Len returns the number of items queued.
func (q *Queue[T]) Len() int { return len(q.h.list) }

// Next returns the earliest deadline, and false when the queue is empty.
func (q *Queue[T]) Next() (time.Time, bool) {
	if len(q.h.list) == 0 {
		return time.Time{}, false
	}
	return q.h.list[0].at, true
}

// PopDue takes out and returns the item with the earliest deadline when
// that deadline is at or before now; false when there is none.
func (q *Queue[T]) PopDue(now time.Time) (T, bool) {
	if len(q.h.list) == 0 || q.h.list[0].at.After(now) {
		var none T
		return none, false
	}
	return heap.Pop(q.heap()).(T), true
}

func (q *Queue[T]) heap() *items[T] { return &q.h }

// entry is an item in the heap with its deadline beside it, so that
// ordering reads no item.
type entry[T Item] struct {
	at   time.Time
	slot *Slot
	item T
}

// items implements heap.Interface, keeping each item's Slot.pos current.
type items[T Item] struct {
	list []entry[T]
}

func (h *items[T]) Len() int { return len(h.list) }

func (h *items[T]) Less(i, j int) bool { return h.list[i].at.Before(h.list[j].at) }

func (h *items[T]) Swap(i, j int) {
	h.list[i], h.list[j] = h.list[j], h.list[i]
	h.list[i].slot.pos, h.list[j].slot.pos = i+1, j+1
}

// Push is heap.Interface's; Set appends itself instead.
func (h *items[T]) Push(x any) {
	item := x.(T)
	s := item.slot()
	h.list = append(h.list, entry[T]{at: s.at, slot: s, item: item})
	s.pos = len(h.list)
}

// Pop returns the item, not its entry, which would be boxed.
func (h *items[T]) Pop() any {
	last := len(h.list) - 1
	e := h.list[last]
	h.list[last] = entry[T]{}
	h.list = h.list[:last]
	e.slot.pos = 0
	return e.item
}
