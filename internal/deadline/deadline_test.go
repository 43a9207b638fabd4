package deadline

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type item struct {
	Slot
	id int
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// check verifies the heap's order and that every item knows its place.
func check(t *testing.T, q *Queue[*item]) {
	t.Helper()
	for i, e := range q.h.list {
		if x := e.item; x.pos != i+1 || e.slot != &x.Slot || !e.at.Equal(x.Deadline()) {
			t.Fatalf("item %d at index %d has pos %d, deadline %v beside %v", x.id, i, x.pos, x.Deadline(), e.at)
		}
		if i > 0 && q.h.Less(i, (i-1)/2) {
			t.Fatalf("heap order broken at index %d", i)
		}
	}
}

// TestAgainstModel drives a queue and a plain map with the same random
// sets, removals and pops, and checks that they agree throughout.
func TestAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	items := make([]*item, 50)
	for i := range items {
		items[i] = &item{id: i}
	}
	var q Queue[*item]
	model := map[int]time.Time{}
	for step := range 20000 {
		x := items[rng.IntN(len(items))]
		switch op := rng.IntN(10); {
		case op < 5:
			d := at(rng.IntN(100))
			q.Set(x, d)
			model[x.id] = d
		case op < 7:
			q.Remove(x)
			delete(model, x.id)
		default:
			now := at(rng.IntN(100))
			got, ok := q.PopDue(now)
			want, wantOK := earliest(model)
			if wantOK && model[want].After(now) {
				wantOK = false
			}
			// Of items with equal deadlines, any may come first.
			if ok != wantOK || ok && !model[got.id].Equal(model[want]) {
				t.Fatalf("step %d: PopDue(%v) = %v, %v; want an item due at %v, %v", step, now, got, ok, model[want], wantOK)
			}
			if ok {
				delete(model, got.id)
				if got.Queued() {
					t.Fatalf("step %d: a popped item is still queued", step)
				}
			}
		}
		check(t, &q)
		if q.Len() != len(model) {
			t.Fatalf("step %d: Len = %d, want %d", step, q.Len(), len(model))
		}
		next, ok := q.Next()
		want, wantOK := earliest(model)
		if ok != wantOK || ok && !next.Equal(model[want]) {
			t.Fatalf("step %d: Next = %v, %v; want %v, %v", step, next, ok, model[want], wantOK)
		}
		for _, y := range items {
			if _, in := model[y.id]; in != y.Queued() {
				t.Fatalf("step %d: item %d Queued = %v, want %v", step, y.id, y.Queued(), in)
			}
		}
	}
}

// earliest returns one of the model's items with the earliest deadline.
func earliest(model map[int]time.Time) (int, bool) {
	ids := make([]int, 0, len(model))
	for id := range model {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return 0, false
	}
	return slices.MinFunc(ids, func(a, b int) int {
		if c := model[a].Compare(model[b]); c != 0 {
			return c
		}
		return a - b
	}), true
}

// TestPopDueInOrder pops everything due, in deadline order, and leaves
// what is not due yet.
func TestPopDueInOrder(t *testing.T) {
	var q Queue[*item]
	for i, s := range []int{5, 1, 3, 3, 9} {
		q.Set(&item{id: i}, at(s))
	}
	var got []int
	for x, ok := q.PopDue(at(5)); ok; x, ok = q.PopDue(at(5)) {
		got = append(got, x.id)
	}
	if !slices.Equal(got, []int{1, 2, 3, 0}) && !slices.Equal(got, []int{1, 3, 2, 0}) {
		t.Errorf("popped %v, want 1, then 2 and 3 (due together), then 0", got)
	}
	if next, ok := q.Next(); !ok || !next.Equal(at(9)) || q.Len() != 1 {
		t.Errorf("left Next = %v, %v with Len %d; want %v, true with 1", next, ok, q.Len(), at(9))
	}
}

// TestSetMoves moves a queued item's deadline both ways, and a removed or
// never-queued item is ignored by Remove.
func TestSetMoves(t *testing.T) {
	var q Queue[*item]
	a, b := &item{id: 1}, &item{id: 2}
	q.Set(a, at(1))
	q.Set(b, at(2))
	q.Set(a, at(3))
	if next, _ := q.Next(); !next.Equal(at(2)) {
		t.Errorf("after moving a later: Next = %v, want %v", next, at(2))
	}
	q.Set(a, at(0))
	if next, _ := q.Next(); !next.Equal(at(0)) || !a.Deadline().Equal(at(0)) {
		t.Errorf("after moving a earlier: Next = %v, a's deadline %v; want %v", next, a.Deadline(), at(0))
	}
	q.Remove(a)
	q.Remove(a)
	q.Remove(&item{id: 3})
	if q.Len() != 1 || a.Queued() || !b.Queued() {
		t.Errorf("after removing a: Len %d, a queued %v, b queued %v", q.Len(), a.Queued(), b.Queued())
	}
	if (&item{}).Deadline() != (time.Time{}) {
		t.Error("a never-queued item has a deadline")
	}
}

func BenchmarkSetPop(b *testing.B) {
	items := make([]*item, 10000)
	for i := range items {
		items[i] = &item{id: i}
	}
	var q Queue[*item]
	for i := 0; b.Loop(); i++ {
		x := items[i%len(items)]
		q.Set(x, at(i))
		if q.Len() == len(items) {
			q.PopDue(at(i))
		}
	}
}
