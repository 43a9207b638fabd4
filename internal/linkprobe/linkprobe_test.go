package linkprobe

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

func TestProbeAndServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	var served Stats
	g.Go(func() error { var err error; served, err = Serve(ctx, ln, 2); return err })
	probes := make([]Stats, 2)
	for i := range probes {
		g.Go(func() error { var err error; probes[i], err = Probe(ctx, ln.Addr().String(), 1<<20); return err })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, st := range append(probes, served) {
		if st.Bandwidth <= 0 || st.Latency <= 0 || st.Elapsed <= 0 {
			t.Errorf("stats %+v: want positive bandwidth, latency and elapsed", st)
		}
	}
}

func TestServeGivesUpWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Serve(ctx, ln, 1); done <- err }()
	cancel()
	if err := <-done; err == nil {
		t.Error("Serve without peers returned no error after its context ended")
	}
}

func TestProbeRefusesBadLeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close() // hangs up at once
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Probe(ctx, ln.Addr().String(), 1024); err == nil {
		t.Error("a probe of a leader that hung up succeeded")
	}
}
