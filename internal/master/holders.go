package master

import (
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// holders records which agent process (client.IncarnationHeader) holds each node id's live sessions,
// so that a second live agent claiming a node id is refused while the
// agent's own reconnects, and a restarted agent once the old one's session
// is gone (or silent past the heartbeat timeout), resume the node.
type holders struct {
	mu    sync.Mutex
	nodes map[string]*holder
}

type holder struct {
	incarnation string
	sessions    int
	heard       time.Time // the last message of any of its sessions
	timeout     time.Duration
}

// defaultHolderTimeout is the heartbeat timeout of a claimant that says
// none: rover run's default.
const defaultHolderTimeout = 30 * time.Second

func newHolders() *holders { return &holders{nodes: map[string]*holder{}} }

// claim registers a session of node id by incarnation at now, or refuses it
// with AlreadyExists when another incarnation holds a session of id that
// was heard within its heartbeat timeout. timeout is the claimant's
// heartbeat timeout. The returned release ends the session's claim.
func (h *holders) claim(id, incarnation string, timeout time.Duration, now time.Time) (release func(), err error) {
	if h == nil || incarnation == "" {
		return func() {}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.nodes[id]
	if cur != nil && cur.incarnation != incarnation && now.Sub(cur.heard) < cur.timeout {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf(
			"node id %q is held by another live agent (a process of incarnation %s, heard %s ago): two agents claim the same node; "+
				"give each agent its own --node-rank (NODE_RANK) or --node-id, or stop the other agent first (a restarted agent resumes the node once the old one is gone)",
			id, cur.incarnation, now.Sub(cur.heard).Round(time.Millisecond)))
	}
	if cur == nil || cur.incarnation != incarnation {
		cur = &holder{incarnation: incarnation}
		h.nodes[id] = cur
	}
	cur.sessions++
	cur.heard, cur.timeout = now, timeout
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		cur.sessions--
		if cur.sessions == 0 && h.nodes[id] == cur {
			delete(h.nodes, id)
		}
	}, nil
}

// heard records a message of incarnation's session of node id at now.
func (h *holders) heard(id, incarnation string, now time.Time) {
	if h == nil || incarnation == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.nodes[id]; cur != nil && cur.incarnation == incarnation {
		cur.heard = now
	}
}
