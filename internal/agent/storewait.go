package agent

import (
	"bufio"
	"context"
	"log/slog"
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
