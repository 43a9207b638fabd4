package agent

import (
	"time"

	"github.com/roverml/rover/internal/tcpinfo"
)

// minLinkBytes is how much a connection must carry between two samples to
// count in the link's round trip: an idle connection's smoothed round trip
// is of its last small exchange, not of the link under load.
const minLinkBytes = 16 << 10

// linkMeter measures a node's link to the other nodes from its workers' TCP
// connections (docs/design/collective-timing.md, "A slow link"): the least
// smoothed round trip of the connections to other hosts that carried data
// since the previous sample. Every connection of a node behind a slow link
// (a rate limit, a congested or long path) has a long round trip; a node
// with a good link has some short one.
type linkMeter struct {
	read  func(pids []int) ([]tcpinfo.Conn, error)
	pids  []int
	moved map[uint64]uint64 // bytes acked and received, by socket inode, at the previous sample
}

func newLinkMeter() *linkMeter {
	return &linkMeter{read: tcpinfo.Processes, moved: map[uint64]uint64{}}
}

// started begins measuring a new group's worker processes.
func (l *linkMeter) started(pids []int) {
	l.pids = pids
	clear(l.moved)
}

// sample returns the least round trip of the busy connections to other
// hosts and how many there were (0, 0 without any, or when the
// connections cannot be read).
func (l *linkMeter) sample() (time.Duration, int) {
	if len(l.pids) == 0 {
		return 0, 0
	}
	conns, err := l.read(l.pids)
	if err != nil {
		return 0, 0
	}
	now := make(map[uint64]uint64, len(conns))
	var best time.Duration
	n := 0
	for _, c := range conns {
		ra, la := c.Remote.Addr(), c.Local.Addr()
		if ra.IsLoopback() || ra == la || c.RTT <= 0 {
			continue // a local rank on this node, or nothing measured
		}
		total := c.BytesAcked + c.BytesReceived
		now[c.Inode] = total
		if prev, ok := l.moved[c.Inode]; ok && total >= prev+minLinkBytes {
			if n == 0 || c.RTT < best {
				best = c.RTT
			}
			n++
		}
	}
	l.moved = now
	return best, n
}
