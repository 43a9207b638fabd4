package tcpinfo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The sock_diag constants this package uses (linux/sock_diag.h,
// linux/inet_diag.h, linux/netlink.h).
const (
	sockDiagByFamily = 20
	inetDiagInfo     = 2
	tcpEstablished   = 1
	nlmsgDone        = 3
	nlmsgError       = 2
	nlmHdrLen        = 16
	inetDiagMsgLen   = 72
	inetDiagReqLen   = 56
	// maxConns bounds what one read returns: a process holding more
	// established TCP connections than this is read in part.
	maxConns = 1 << 16
)

// tcp_info offsets (linux/tcp.h, stable since Linux 4.x; fields past the
// length the kernel sends are left 0).
const (
	offRTT          = 68
	offRTTVar       = 72
	offTotalRetrans = 100
	offBytesAcked   = 120
	offBytesRecv    = 128
	offMinRTT       = 148
	offDeliveryRate = 160
)

// Processes returns the established TCP connections (IPv4 and IPv6) that
// the processes pids hold open, as sockets among their file descriptors.
// A process that has exited, or whose descriptors cannot be read, holds
// none. The connections are those of the caller's network namespace.
func Processes(pids []int) ([]Conn, error) {
	inodes := map[uint64]bool{}
	for _, pid := range pids {
		socketInodes(pid, inodes)
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	var out []Conn
	for _, family := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		cs, err := dump(family, func(inode uint64) bool { return inodes[inode] })
		if err != nil {
			return out, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// socketInodes adds the inodes of pid's socket descriptors to into.
func socketInodes(pid int, into map[uint64]bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(l, "socket:[") || !strings.HasSuffix(l, "]") {
			continue
		}
		if n, err := strconv.ParseUint(l[len("socket:["):len(l)-1], 10, 64); err == nil {
			into[n] = true
		}
	}
}

// dump asks the kernel for family's established TCP sockets with their
// tcp_info and returns those whose inode keep accepts.
func dump(family uint8, keep func(uint64) bool) ([]Conn, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	if err != nil {
		return nil, fmt.Errorf("open a sock_diag netlink socket: %w", err)
	}
	defer syscall.Close(fd)
	if err := syscall.Sendto(fd, request(family), 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("ask sock_diag for TCP sockets: %w", err)
	}
	buf := make([]byte, 64<<10)
	var out []Conn
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return out, fmt.Errorf("read sock_diag's answer: %w", err)
		}
		done, err := parse(buf[:n], keep, &out)
		if err != nil || done {
			return out, err
		}
	}
}

// request is a sock_diag dump request for family's established TCP
// sockets with tcp_info.
func request(family uint8) []byte {
	b := make([]byte, nlmHdrLen+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], sockDiagByFamily)
	ne.PutUint16(b[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_DUMP)
	ne.PutUint32(b[8:], 1) // sequence
	r := b[nlmHdrLen:]
	r[0], r[1], r[2] = family, syscall.IPPROTO_TCP, 1<<(inetDiagInfo-1)
	ne.PutUint32(r[4:], 1<<tcpEstablished)
	return b
}

// parse reads one datagram of netlink messages into out; done when the
// dump ended.
func parse(b []byte, keep func(uint64) bool, out *[]Conn) (done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= nlmHdrLen {
		l := int(ne.Uint32(b[0:]))
		typ := ne.Uint16(b[4:])
		if l < nlmHdrLen || l > len(b) {
			return true, fmt.Errorf("sock_diag sent a message of %d bytes in %d", l, len(b))
		}
		msg := b[nlmHdrLen:l]
		switch typ {
		case nlmsgDone:
			return true, nil
		case nlmsgError:
			if len(msg) >= 4 {
				if code := int32(ne.Uint32(msg)); code != 0 {
					return true, fmt.Errorf("sock_diag: %w", syscall.Errno(-code))
				}
			}
			return true, nil
		case sockDiagByFamily:
			if c, ok := conn(msg); ok && keep(c.Inode) && len(*out) < maxConns {
				*out = append(*out, c)
			}
		}
		b = b[min(len(b), align4(l)):]
	}
	return false, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

// conn decodes one inet_diag_msg and its INET_DIAG_INFO attribute.
func conn(m []byte) (Conn, bool) {
	if len(m) < inetDiagMsgLen {
		return Conn{}, false
	}
	ne := binary.NativeEndian
	family := m[0]
	// inet_diag_sockid at 4: sport, dport (big endian), src, dst (16 bytes each).
	sport, dport := binary.BigEndian.Uint16(m[4:]), binary.BigEndian.Uint16(m[6:])
	src, dst := addr(family, m[8:24]), addr(family, m[24:40])
	c := Conn{Local: netip.AddrPortFrom(src, sport), Remote: netip.AddrPortFrom(dst, dport), Inode: uint64(ne.Uint32(m[68:]))}
	for a := m[inetDiagMsgLen:]; len(a) >= 4; {
		l, typ := int(ne.Uint16(a[0:])), ne.Uint16(a[2:])
		if l < 4 || l > len(a) {
			break
		}
		if typ == inetDiagInfo {
			info(a[4:l], &c)
		}
		a = a[min(len(a), align4(l)):]
	}
	return c, true
}

func addr(family uint8, b []byte) netip.Addr {
	if family == syscall.AF_INET {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16([16]byte(b[:16])).Unmap()
}

// info decodes the fields of struct tcp_info that Conn has.
func info(t []byte, c *Conn) {
	u32 := func(off int) uint32 {
		if off+4 > len(t) {
			return 0
		}
		return binary.NativeEndian.Uint32(t[off:])
	}
	u64 := func(off int) uint64 {
		if off+8 > len(t) {
			return 0
		}
		return binary.NativeEndian.Uint64(t[off:])
	}
	c.RTT = time.Duration(u32(offRTT)) * time.Microsecond
	c.RTTVar = time.Duration(u32(offRTTVar)) * time.Microsecond
	c.MinRTT = time.Duration(u32(offMinRTT)) * time.Microsecond
	c.TotalRetrans = u32(offTotalRetrans)
	c.BytesAcked, c.BytesReceived = u64(offBytesAcked), u64(offBytesRecv)
	c.DeliveryRate = u64(offDeliveryRate)
}
