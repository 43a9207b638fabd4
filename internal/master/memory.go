package master

import (
	"fmt"
	"maps"
	"net"
	"slices"
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

// maxSnapshotsPerRank bounds a join's snapshot list (arenas hold two);
// maxBackupSnapshots and maxBackupLocal bound the backups it keeps of
// another node's shards, whose local ranks are that node's.
const (
	maxSnapshotsPerRank = 8
	maxBackupSnapshots  = 1024
	maxBackupLocal      = 1024
)

func validateSnapshots(r *roverv1.JoinRequest) ([]jobstate.MemorySnapshot, error) {
	snaps := r.GetSnapshots()
	lws := int(r.GetLocalWorldSize())
	backups := 0
	for _, s := range snaps {
		if s.GetBackup() {
			backups++
		}
	}
	if own := len(snaps) - backups; own > maxSnapshotsPerRank*max(lws, 1) {
		return nil, invalid("%d memory snapshots for %d local ranks: at most %d per rank", own, lws, maxSnapshotsPerRank)
	}
	if backups > maxBackupSnapshots {
		return nil, invalid("%d backup snapshots: at most %d", backups, maxBackupSnapshots)
	}
	out := make([]jobstate.MemorySnapshot, 0, len(snaps))
	for i, s := range snaps {
		m := jobstate.MemorySnapshot{LocalRank: int(s.GetLocalRank()), Step: s.GetStep(), Rank: int(s.GetRank()),
			WorldSize: int(s.GetWorldSize()), Mode: s.GetMode(), Backup: s.GetBackup()}
		switch {
		case m.Backup && (m.LocalRank < 0 || m.LocalRank >= maxBackupLocal):
			return nil, invalid("backup snapshot %d: local_rank %d: want 0 to %d", i, m.LocalRank, maxBackupLocal-1)
		case m.Backup && m.Mode != jobstate.ModeSharded:
			return nil, invalid("backup snapshot %d: mode %q: only %q snapshots are kept as backups", i, m.Mode, jobstate.ModeSharded)
		case !m.Backup && (m.LocalRank < 0 || m.LocalRank >= lws):
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
// memory step from a peer's memory or a backup peer's, and from which
// nodes ("" when every node held the step, or round is not the last
// closed one). Whether a transfer succeeded, and how long it took, the
// nodes' resume events say (the restart's per-node sources).
func (c *core) peerRestores(round int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.st.Memory.Agreement()
	if !a.OK || a.Round != round || (len(a.Fetching) == 0 && len(a.Backups) == 0) {
		return ""
	}
	ids := func(ps []jobstate.MemoryPeer) string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.NodeID
		}
		return strings.Join(out, ", ")
	}
	var parts []string
	if len(a.Fetching) > 0 {
		parts = append(parts, fmt.Sprintf("%s from a peer's memory (%s)", strings.Join(a.Fetching, ", "), ids(a.Holders)))
	}
	nodes := slices.Sorted(maps.Keys(a.Backups))
	for i, node := range nodes {
		if i == maxListedRestores {
			parts = append(parts, fmt.Sprintf("%d more from their backup peers", len(nodes)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s from its backup peer (%s)", node, ids(a.Backups[node])))
	}
	return fmt.Sprintf("step %d: %s, the other nodes from their own", a.Step, strings.Join(parts, ", "))
}

// maxListedRestores bounds the nodes peerRestores names one by one.
const maxListedRestores = 8
