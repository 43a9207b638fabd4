package agent

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// storeWaitLimit bounds how long the agent holds back local ranks 1.. of
// the node of rank 0 for rank 0's torch TCPStore to listen, once rank 0
// started in its standby. A client that connects before the store listens
// retries only after a second (torch 1.13's connect back-off), which would
// be most of a standby restart's downtime.
const storeWaitLimit = time.Second

// storePollInterval is how often the port is looked at meanwhile.
const storePollInterval = 2 * time.Millisecond

// awaitStore waits until something on this node listens on port (rank
// 0's TCPStore at MASTER_PORT), rank 0 exits, ctx ends or storeWaitLimit
// passes. A script that never listened within the limit (no TCPStore, or
// one created late) is not waited for again: the pool stops waiting.
func (sp *standbyPool) awaitStore(ctx context.Context, port int, rank0Done <-chan struct{}, log *slog.Logger) {
	sp.mu.Lock()
	skip := sp.noStoreWait
	sp.mu.Unlock()
	if skip || port <= 0 {
		return
	}
	start := time.Now()
	deadline := time.NewTimer(storeWaitLimit)
	defer deadline.Stop()
	tick := time.NewTicker(storePollInterval)
	defer tick.Stop()
	for !listening(port) {
		select {
		case <-ctx.Done():
			return
		case <-rank0Done:
			return
		case <-deadline.C:
			sp.mu.Lock()
			sp.noStoreWait = true
			sp.mu.Unlock()
			log.Info("rank 0 did not listen on MASTER_PORT in time; later restarts start every local rank at once",
				"port", port, "waited", storeWaitLimit)
			return
		case <-tick.C:
		}
	}
	log.Info("rank 0's store is listening", "port", port, "after", time.Since(start).Round(time.Millisecond))
}

// awaitRemoteStore waits, on a node that does not host rank 0, until rank
// 0's TCPStore at addr:port accepts a connection (closed at once: the store
// drops a client that sends nothing), ctx ends or storeWaitLimit passes,
// when local rank 0's standby is ready. Workers handed over from their
// standbys reach init_process_group within milliseconds, usually before
// rank 0 on its node created the store; torch 1.13's client then tries
// again only a second later, most of the restart's downtime. A cold start
// is not held back: its imports take longer than rank 0's. A store that
// did not listen within the limit is not waited for again.
func (sp *standbyPool) awaitRemoteStore(ctx context.Context, addr string, port int, log *slog.Logger) {
	sp.mu.Lock()
	s := sp.slots[0]
	skip := sp.noRemoteStoreWait || s == nil || addr == "" || port <= 0
	sp.mu.Unlock()
	if skip {
		return
	}
	select {
	case <-s.ready:
	default:
		return
	}
	start := time.Now()
	if !dialUntil(ctx, net.JoinHostPort(addr, strconv.Itoa(port)), storeWaitLimit) {
		if ctx.Err() != nil {
			return
		}
		sp.mu.Lock()
		sp.noRemoteStoreWait = true
		sp.mu.Unlock()
		log.Info("rank 0's store did not accept connections in time; later restarts start the workers at once",
			"addr", addr, "port", port, "waited", storeWaitLimit)
		return
	}
	log.Info("rank 0's store accepts connections", "addr", addr, "port", port, "after", time.Since(start).Round(time.Millisecond))
}

// dialUntil dials address every storePollInterval until a connection is
// accepted (it is closed at once), ctx ends or limit passes; it reports
// whether one was.
func dialUntil(ctx context.Context, address string, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var d net.Dialer
	tick := time.NewTicker(storePollInterval)
	defer tick.Stop()
	for {
		if c, err := d.DialContext(ctx, "tcp", address); err == nil {
			c.Close()
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// listening reports whether a TCP socket of this network namespace
// listens on port (any address), from /proc/net/tcp and tcp6.
func listening(port int) bool {
	want := strings.ToUpper(strconv.FormatInt(int64(port), 16))
	for len(want) < 4 {
		want = "0" + want
	}
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if listensIn(path, want) {
			return true
		}
	}
	return false
}

func listensIn(path, hexPort string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "sl local_address rem_address st ...": local "ADDR:PORT", st 0A = LISTEN.
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != "0A" {
			continue
		}
		if _, p, ok := strings.Cut(fields[1], ":"); ok && p == hexPort {
			return true
		}
	}
	return false
}
