package agent

import (
	"net"
	"testing"
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
