// Package tcpinfo reads the kernel's TCP statistics (struct tcp_info:
// smoothed round-trip time, delivery rate, bytes acked) of the established
// TCP connections that given processes hold, through the sock_diag netlink
// interface (NETLINK_INET_DIAG), the interface `ss -ti` uses. The agent
// reads its workers' connections (gloo's pairs, the TCPStore's) to find a
// node whose link is slow: every connection of such a node has a long
// round trip, where the links between the other nodes do not
// (docs/design/collective-timing.md, "A slow link").
package tcpinfo

import (
	"net/netip"
	"time"
)

// Conn is one established TCP connection and its statistics.
type Conn struct {
	Local, Remote netip.AddrPort
	Inode         uint64
	// RTT is the smoothed round-trip time and RTTVar its mean deviation;
	// MinRTT the least seen lately (the kernel's windowed minimum).
	RTT, RTTVar, MinRTT time.Duration
	// DeliveryRate is the most recent delivery rate sample, in bytes per
	// second (0 when the kernel does not report it).
	DeliveryRate uint64
	// BytesAcked and BytesReceived count the connection's payload so far.
	BytesAcked, BytesReceived uint64
	// TotalRetrans counts its retransmitted segments.
	TotalRetrans uint32
}
