package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/roverml/rover/internal/tcpinfo"
)

// TestLinkMeter: the link's round trip is the least of the connections to
// other hosts that carried at least minLinkBytes since the previous
// sample; connections to this host, idle ones and those first seen now do
// not count.
func TestLinkMeter(t *testing.T) {
	local := netip.MustParseAddrPort("10.0.0.1:5000")
	conn := func(inode uint64, remote string, rtt time.Duration, bytes uint64) tcpinfo.Conn {
		return tcpinfo.Conn{Local: local, Remote: netip.MustParseAddrPort(remote), Inode: inode, RTT: rtt, BytesAcked: bytes}
	}
	var conns []tcpinfo.Conn
	l := newLinkMeter()
	l.read = func([]int) ([]tcpinfo.Conn, error) { return conns, nil }
	if rtt, n := l.sample(); rtt != 0 || n != 0 {
		t.Fatalf("before any workers: %v, %d; want nothing", rtt, n)
	}
	l.started([]int{1})
	conns = []tcpinfo.Conn{
		conn(1, "10.0.0.2:6000", 30*time.Millisecond, 0),
		conn(2, "10.0.0.3:6000", 20*time.Millisecond, 0),
		conn(3, "127.0.0.1:6000", time.Microsecond, 0), // a local rank
		conn(4, "10.0.0.1:6001", time.Microsecond, 0),  // this host's own address
		conn(5, "10.0.0.2:6001", time.Millisecond, 0),  // idle
	}
	if rtt, n := l.sample(); rtt != 0 || n != 0 {
		t.Fatalf("first sample: %v, %d; want nothing (no previous bytes)", rtt, n)
	}
	conns = []tcpinfo.Conn{
		conn(1, "10.0.0.2:6000", 30*time.Millisecond, 1<<20),
		conn(2, "10.0.0.3:6000", 20*time.Millisecond, 1<<20),
		conn(3, "127.0.0.1:6000", time.Microsecond, 1<<20),
		conn(4, "10.0.0.1:6001", time.Microsecond, 1<<20),
		conn(5, "10.0.0.2:6001", time.Millisecond, 100),
		conn(6, "10.0.0.4:6000", time.Microsecond, 1<<20), // new since the previous sample
	}
	if rtt, n := l.sample(); rtt != 20*time.Millisecond || n != 2 {
		t.Errorf("second sample: %v, %d; want 20ms over 2 busy connections", rtt, n)
	}
	l.started([]int{2}) // a new group: its connections are new
	if rtt, n := l.sample(); rtt != 0 || n != 0 {
		t.Errorf("first sample of a new group: %v, %d; want nothing", rtt, n)
	}
}
