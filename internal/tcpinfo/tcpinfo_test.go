package tcpinfo

import (
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
)

// TestProcessesFindsItsConnections: a connection this process holds on
// loopback is found from both ends, with the bytes sent acked and
// received, and a round-trip time; a process that does not exist holds
// none.
func TestProcessesFindsItsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	defer server.Close()
	const n = 1 << 20
	go func() { _, _ = client.Write(make([]byte, n)) }()
	if _, err := io.CopyN(io.Discard, server, n); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write([]byte("ok")); err != nil { // the client acks it
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}

	conns, err := Processes([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	cl := netip.MustParseAddrPort(client.LocalAddr().String())
	sv := netip.MustParseAddrPort(server.LocalAddr().String())
	var fromClient, fromServer *Conn
	for i, c := range conns {
		switch {
		case c.Local == cl && c.Remote == sv:
			fromClient = &conns[i]
		case c.Local == sv && c.Remote == cl:
			fromServer = &conns[i]
		}
	}
	if fromClient == nil || fromServer == nil {
		t.Fatalf("connections %v: want %v->%v and back", conns, cl, sv)
	}
	if fromClient.BytesAcked < n || fromServer.BytesReceived < n {
		t.Errorf("client acked %d, server received %d: want at least %d each", fromClient.BytesAcked, fromServer.BytesReceived, n)
	}
	if fromClient.RTT <= 0 || fromClient.Inode == 0 {
		t.Errorf("client's connection %+v: want a round-trip time and an inode", *fromClient)
	}
	if cs, err := Processes([]int{1 << 30}); err != nil || len(cs) != 0 {
		t.Errorf("Processes of a pid that does not exist = %v, %v; want none", cs, err)
	}
}

// FuzzParse: whatever the kernel (or a bug) sends, parse neither panics
// nor keeps more than it was given.
func FuzzParse(f *testing.F) {
	f.Add(request(2))
	f.Add(make([]byte, nlmHdrLen+inetDiagMsgLen+8))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out []Conn
		_, _ = parse(b, func(uint64) bool { return true }, &out)
		if len(out) > len(b)/nlmHdrLen+1 {
			t.Fatalf("%d connections from %d bytes", len(out), len(b))
		}
	})
}
