package master

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestHolders: a second live agent of a node id is refused; the agent's own
// second session (a reconnect), and another agent once the holder's
// sessions ended or it went silent past its heartbeat timeout, are not.
func TestHolders(t *testing.T) {
	h := newHolders()
	t0 := time.Unix(1000, 0)
	const timeout = 30 * time.Second
	releaseA, err := h.claim("host-rank1", "a", timeout, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.claim("host-rank1", "b", timeout, t0.Add(time.Second)); connect.CodeOf(err) != connect.CodeAlreadyExists ||
		!strings.Contains(err.Error(), `node id "host-rank1" is held by another live agent`) || !strings.Contains(err.Error(), "--node-rank") {
		t.Fatalf("a second agent's claim = %v, want already_exists naming the node and --node-rank", err)
	}
	releaseA2, err := h.claim("host-rank1", "a", timeout, t0.Add(2*time.Second))
	if err != nil {
		t.Fatalf("the holder's own reconnect was refused: %v", err)
	}
	if _, err := h.claim("host-rank2", "b", timeout, t0); err != nil {
		t.Fatalf("another node id was refused: %v", err)
	}
	// Heard just now, then silent: refused within the timeout, not after.
	h.heard("host-rank1", "a", t0.Add(10*time.Second))
	if _, err := h.claim("host-rank1", "b", timeout, t0.Add(39*time.Second)); err == nil {
		t.Fatal("a claim within the holder's heartbeat timeout passed")
	}
	releaseB, err := h.claim("host-rank1", "b", timeout, t0.Add(41*time.Second))
	if err != nil {
		t.Fatalf("a claim past the silent holder's heartbeat timeout: %v", err)
	}
	// The old holder's sessions end; they do not release the new one's claim.
	releaseA()
	releaseA2()
	if _, err := h.claim("host-rank1", "c", timeout, t0.Add(42*time.Second)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("a third agent's claim while b holds = %v, want already_exists", err)
	}
	releaseB()
	if _, err := h.claim("host-rank1", "c", timeout, t0.Add(43*time.Second)); err != nil {
		t.Fatalf("a restarted agent once the old one's session ended: %v", err)
	}
	// Sessions without an incarnation are not checked.
	if _, err := h.claim("host-rank2", "", timeout, t0); err != nil {
		t.Fatal(err)
	}
}
