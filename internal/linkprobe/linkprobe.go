// Package linkprobe measures the TCP link between two node agents: round
// trips for latency, then a block each way for bandwidth. It is the Go-side
// half of the node check (internal/nodecheck); the collective through the
// job's own stack is the other half. The group's leader serves, its peers
// probe; both sides time the exchange, so a slow link slows both.
package linkprobe

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sync/errgroup"
)

// Pings is the number of one-byte round trips of a probe.
const Pings = 5

// maxSize bounds the block a peer may ask the leader to exchange.
const maxSize = 1 << 30

// Stats is one side's measurement of a link.
type Stats struct {
	// Latency is the mean round trip of the pings.
	Latency time.Duration
	// Bandwidth is bytes per second over the two blocks.
	Bandwidth float64
	// Elapsed is the whole exchange.
	Elapsed time.Duration
}

// Probe connects to a leader at addr and exchanges a block of size bytes
// each way.
func Probe(ctx context.Context, addr string, size int) (Stats, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Stats{}, fmt.Errorf("connect to the link probe at %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	st, err := exchange(conn, size, true)
	if err != nil {
		return st, fmt.Errorf("probe the link to %s: %w", addr, err)
	}
	return st, nil
}

// Serve accepts peers probes on ln and answers them, then returns the
// slowest exchange's stats. It closes ln.
func Serve(ctx context.Context, ln net.Listener, peers int) (Stats, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	g, gctx := errgroup.WithContext(ctx)
	stats := make([]Stats, peers)
	for i := range peers {
		conn, err := ln.Accept()
		if err != nil {
			_ = g.Wait()
			return Stats{}, fmt.Errorf("wait for peer %d of %d of the link probe: %w", i+1, peers, cmpCtx(ctx, err))
		}
		g.Go(func() error {
			defer conn.Close()
			stop := context.AfterFunc(gctx, func() { conn.SetDeadline(time.Now()) })
			defer stop()
			st, err := exchange(conn, 0, false)
			if err != nil {
				return fmt.Errorf("answer the link probe of %s: %w", conn.RemoteAddr(), err)
			}
			stats[i] = st
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Stats{}, err
	}
	var worst Stats
	for i, st := range stats {
		if i == 0 || st.Elapsed > worst.Elapsed {
			worst = st
		}
	}
	return worst, nil
}

func cmpCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// exchange runs the protocol: the prober sends the size, then Pings
// one-byte round trips, then each side sends a block of size bytes that
// the other acknowledges with one byte (prober first).
func exchange(conn net.Conn, size int, prober bool) (Stats, error) {
	start := time.Now()
	var hdr [8]byte
	if prober {
		binary.BigEndian.PutUint64(hdr[:], uint64(size))
		if _, err := conn.Write(hdr[:]); err != nil {
			return Stats{}, err
		}
	} else {
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return Stats{}, err
		}
		n := binary.BigEndian.Uint64(hdr[:])
		if n > maxSize {
			return Stats{}, fmt.Errorf("a block of %d bytes was asked for, at most %d are allowed", n, maxSize)
		}
		size = int(n)
	}
	one := make([]byte, 1)
	var rtt time.Duration
	for range Pings {
		t := time.Now()
		if err := pingPong(conn, one, prober); err != nil {
			return Stats{}, fmt.Errorf("ping: %w", err)
		}
		rtt += time.Since(t)
	}
	t := time.Now()
	block := make([]byte, size)
	for _, sending := range []bool{prober, !prober} {
		if err := transfer(conn, block, one, sending); err != nil {
			return Stats{}, fmt.Errorf("transfer %d bytes: %w", size, err)
		}
	}
	xfer := time.Since(t)
	st := Stats{Latency: rtt / Pings, Elapsed: time.Since(start)}
	if xfer > 0 {
		st.Bandwidth = float64(2*size) / xfer.Seconds()
	}
	return st, nil
}

func pingPong(conn net.Conn, one []byte, first bool) error {
	if first {
		if _, err := conn.Write(one); err != nil {
			return err
		}
		_, err := io.ReadFull(conn, one)
		return err
	}
	if _, err := io.ReadFull(conn, one); err != nil {
		return err
	}
	_, err := conn.Write(one)
	return err
}

func transfer(conn net.Conn, block, one []byte, sending bool) error {
	if sending {
		if _, err := conn.Write(block); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, one); err != nil {
			return fmt.Errorf("read the acknowledgement: %w", err)
		}
		return nil
	}
	if _, err := io.ReadFull(conn, block); err != nil {
		return err
	}
	_, err := conn.Write(one)
	return err
}
