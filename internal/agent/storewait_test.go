package agent

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

func TestListeningSeesATCPListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if !listening(port) {
		t.Errorf("port %d is listened on, but listening says no", port)
	}
	ln.Close()
	if listening(port) {
		t.Errorf("port %d is closed, but listening says it listens", port)
	}
}

// TestDialUntilWaitsForTheListener: dialUntil keeps dialing a port nobody
// listens on until a listener appears there, whose connection it closes at
// once; it gives up when its limit passes or its context ends.
func TestDialUntilWaitsForTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if dialUntil(context.Background(), addr, 10*time.Millisecond) {
		t.Fatalf("dialUntil(%s) with nobody listening reported a connection", addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if dialUntil(ctx, addr, time.Minute) {
		t.Fatalf("dialUntil with an ended context reported a connection")
	}

	done := make(chan bool, 1)
	go func() { done <- dialUntil(context.Background(), addr, time.Minute) }()
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s again: %v", addr, err)
	}
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("the probe's connection read %d bytes, %v; want it closed without a byte", n, err)
	}
	c.Close()
	if !<-done {
		t.Errorf("dialUntil did not report the listener")
	}
}
