package rendezvous

import "container/heap"

// ranks tracks which node holds each node rank. A rank is held by a live node
// when owners[r] is set and not lost. free is a min-heap of candidate ranks
// below len(owners) that may be free; entries are checked when popped (lazy
// deletion), so releasing a rank is O(log n) and allocating is amortised
// O(log n).
type ranks struct {
	owners []*nodeRec
	free   intHeap
}

// owner returns the node recorded as holding rank r, or nil.
func (rs *ranks) owner(r int) *nodeRec {
	if r < 0 || r >= len(rs.owners) {
		return nil
	}
	return rs.owners[r]
}

// heldByOther reports whether rank r is held by a live node other than n.
func (rs *ranks) heldByOther(r int, n *nodeRec) (*nodeRec, bool) {
	o := rs.owner(r)
	return o, o != nil && o != n && !o.lost
}

// lowestFree pops the lowest rank not held by a live node.
func (rs *ranks) lowestFree() int {
	for rs.free.Len() > 0 {
		r := heap.Pop(&rs.free).(int)
		if o := rs.owners[r]; o == nil || o.lost {
			return r
		}
	}
	return len(rs.owners)
}

// assign gives rank r to n, releasing n's previous rank. The caller has
// checked that no other live node holds r.
func (rs *ranks) assign(n *nodeRec, r int) {
	if n.rank == r && rs.owner(r) == n {
		return
	}
	rs.release(n)
	for len(rs.owners) <= r {
		if len(rs.owners) < r {
			heap.Push(&rs.free, len(rs.owners))
		}
		rs.owners = append(rs.owners, nil)
	}
	rs.owners[r] = n
	n.rank = r
}

// pushFree adds r to the free candidates. Stale entries pile up when lost
// nodes come back to their ranks; when they outnumber the ranks, the heap is
// rebuilt from owners (amortised O(1) per push).
func (rs *ranks) pushFree(r int) {
	if len(rs.free) < 2*len(rs.owners)+16 {
		heap.Push(&rs.free, r)
		return
	}
	rs.rebuildFree()
}

// rebuildFree sets free to exactly the ranks not held by a live node.
func (rs *ranks) rebuildFree() {
	rs.free = rs.free[:0]
	for r, o := range rs.owners {
		if o == nil || o.lost {
			rs.free = append(rs.free, r) // ascending: already a heap
		}
	}
}

// release makes n's rank available to others (n keeps it as a preference).
func (rs *ranks) release(n *nodeRec) {
	if rs.owner(n.rank) == n {
		rs.owners[n.rank] = nil
		rs.pushFree(n.rank)
	}
}

// lost marks that n's rank may be taken (n stays the owner until then, so it
// gets the rank back if it returns first).
func (rs *ranks) lost(n *nodeRec) {
	if rs.owner(n.rank) == n {
		rs.pushFree(n.rank)
	}
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
