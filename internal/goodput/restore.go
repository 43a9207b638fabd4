package goodput

import (
	"cmp"
	"slices"
	"time"
)

// MaxRestoreNodes bounds the nodes a restart lists in Restart.Nodes.
const MaxRestoreNodes = 16

// NodeRestore is where one node's workers resumed from in a restart, and
// how long it took: the agent's fetch from a peer before the workers
// started (From FromPeer or FromBackup), and the workers' load.
type NodeRestore struct {
	Node  string        `json:"node"`
	Step  int64         `json:"step"`
	From  Source        `json:"from"`
	Peer  string        `json:"peer,omitempty"` // the node fetched from
	Fetch time.Duration `json:"fetch_ns,omitempty"`
	Load  time.Duration `json:"load_ns,omitempty"`
}

// NodeRestored: node's workers of round resumed as r says (its Resumed
// event's details). It is listed in the open restart, once per node (a
// repeated report replaces the first), up to MaxRestoreNodes; further
// nodes are counted. Outside an open restart of round (the job's first
// start, another round) it changes nothing.
func (m *Machine) NodeRestored(round int64, node string, r NodeRestore) {
	cur := m.current()
	if !m.live() || round != m.round || !m.nodes[node] || cur == nil || cur.Done || r.Step < 0 {
		return
	}
	r.Node = node
	if !r.From.valid() {
		r.From = FromNothing
	}
	r.Fetch, r.Load = max(r.Fetch, 0), max(r.Load, 0)
	// Copies: the slice may be shared with a View taken before.
	if i := slices.IndexFunc(cur.Nodes, func(n NodeRestore) bool { return n.Node == node }); i >= 0 {
		nodes := slices.Clone(cur.Nodes)
		nodes[i] = r
		cur.Nodes = nodes
		return
	}
	if len(cur.Nodes) >= MaxRestoreNodes {
		cur.MoreNodes++
		return
	}
	nodes := append(slices.Clone(cur.Nodes), r)
	slices.SortFunc(nodes, func(a, b NodeRestore) int { return cmp.Compare(a.Node, b.Node) })
	cur.Nodes = nodes
}
