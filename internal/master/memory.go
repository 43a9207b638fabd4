package master

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
)

// The join's flash-checkpoint snapshots (jobstate.Memory keeps them and
// agrees the step a closed round's world restores from memory).

// memoryReport is what a join says of the node's memory: its snapshots
// and where its agent serves them to peers.
type memoryReport struct {
	snaps    []jobstate.MemorySnapshot
	peerAddr string
	// peerFailed: the node's last fetch from its peers failed.
	peerFailed bool
}

// maxSnapshotsPerRank bounds a join's snapshot list (arenas hold two).
const maxSnapshotsPerRank = 8

func validateSnapshots(r *roverv1.JoinRequest) ([]jobstate.MemorySnapshot, error) {
	snaps := r.GetSnapshots()
	lws := int(r.GetLocalWorldSize())
	if len(snaps) > maxSnapshotsPerRank*max(lws, 1) {
		return nil, invalid("%d memory snapshots for %d local ranks: at most %d per rank", len(snaps), lws, maxSnapshotsPerRank)
	}
	out := make([]jobstate.MemorySnapshot, 0, len(snaps))
	for i, s := range snaps {
		m := jobstate.MemorySnapshot{LocalRank: int(s.GetLocalRank()), Step: s.GetStep(), Rank: int(s.GetRank()),
			WorldSize: int(s.GetWorldSize()), Mode: s.GetMode()}
		switch {
		case m.LocalRank < 0 || m.LocalRank >= lws:
			return nil, invalid("snapshot %d: local_rank %d is not a local rank (0 to %d)", i, m.LocalRank, lws-1)
		case m.Step < 0:
			return nil, invalid("snapshot %d: step %d is negative", i, m.Step)
		case m.WorldSize < 1 || m.Rank < 0 || m.Rank >= m.WorldSize:
			return nil, invalid("snapshot %d: rank %d is not a rank of a world of size %d", i, m.Rank, m.WorldSize)
		case m.Mode != jobstate.ModeSharded && m.Mode != jobstate.ModeReplicated:
			return nil, invalid("snapshot %d: mode %q: want %q or %q", i, m.Mode, jobstate.ModeSharded, jobstate.ModeReplicated)
		}
		out = append(out, m)
	}
	return out, nil
}

// maxPeerAddr bounds a join's peer address (a host name and a port).
const maxPeerAddr = 300

// validatePeerAddr checks the host:port where a node's agent serves its
// snapshots to peers ("" is none).
func validatePeerAddr(r *roverv1.JoinRequest) (string, error) {
	addr := r.GetPeerAddr()
	if addr == "" {
		return "", nil
	}
	if len(addr) > maxPeerAddr {
		return "", invalid("peer_addr: %d bytes, at most %d (a host:port)", len(addr), maxPeerAddr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", invalid("peer_addr %q: want host:port: %v", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
		return "", invalid("peer_addr %q: want a host and a port from 1 to 65535", addr)
	}
	return addr, nil
}

// peerRestores says which nodes of round's world were to restore its
// memory step from a peer's memory, and from which nodes ("" when every
// node held the step, or round is not the last closed one). Whether a
// transfer succeeded is the node's agent's to log: one that failed loads
// the step from storage.
func (c *core) peerRestores(round int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.st.Memory.Agreement()
	if !a.OK || a.Round != round || len(a.Fetching) == 0 {
		return ""
	}
	from := make([]string, len(a.Holders))
	for i, h := range a.Holders {
		from[i] = h.NodeID
	}
	return fmt.Sprintf("step %d: %s from a peer's memory (%s), the other nodes from their own",
		a.Step, strings.Join(a.Fetching, ", "), strings.Join(from, ", "))
}
