package ckptsaver

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/ckpt/peer"
)

// pushing starts s's pusher and returns a channel told of each push it
// completed (its bytes) or failed (-1).
func pushing(t *testing.T, s *Saver) <-chan int64 {
	t.Helper()
	pushed := make(chan int64, 64)
	s.cfg.Pushed = func(_ time.Duration, n int64) { pushed <- n }
	s.cfg.PushFailed = func() { pushed <- -1 }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.pusher.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return pushed
}

func nextPush(t *testing.T, pushed <-chan int64) int64 {
	t.Helper()
	select {
	case n := <-pushed:
		return n
	case <-time.After(time.Minute):
		t.Fatal("no push completed within a minute")
		return 0
	}
}

// backups lists the steps and ranks s keeps as backups.
func backups(s *Saver) [][2]int64 {
	var out [][2]int64
	for _, m := range s.Inventory() {
		if m.GetBackup() {
			out = append(out, [2]int64{m.GetStep(), int64(m.GetRank())})
		}
	}
	return out
}

// TestBackupPushAndRestore: node a (ranks 0 and 1 of 4) pushes its shards
// to its backup peer b after each save; b keeps the newest two steps of
// each and reports them as backups; a's replacement fetches its shards of
// the newest step from b, byte for byte, into its own arenas.
func TestBackupPushAndRestore(t *testing.T) {
	a, _ := peerNode(t, "a", nil)
	b, bAddr := peerNode(t, "b", nil)
	a.SetBackupPeers(BackupPeers{Round: 3, PeerNode: "b", Addr: bAddr, Run: "job", Token: "secret"})
	b.SetBackupPeers(BackupPeers{Round: 3, Source: "a", Run: "job", Token: "secret"})
	a.cfg.Round = func() int { return 3 } // the round a's workers save in
	pushed := pushing(t, a)
	for step := int64(10); step <= 12; step++ {
		for local := range 2 {
			saveSnapshot(t, a.arenas, local, local, 4, step, "sharded")
			a.backupSaved(local, step)
			if n := nextPush(t, pushed); n <= 0 {
				t.Fatalf("push of step %d, local rank %d: %d", step, local, n)
			}
		}
	}
	want := [][2]int64{{11, 0}, {12, 0}, {11, 1}, {12, 1}}
	if got := backups(b); !equalPairs(got, want) {
		t.Fatalf("b keeps %v, want %v (step, rank)", got, want)
	}
	if b.BackupBytes() <= 0 {
		t.Fatalf("b reports %d bytes of backups", b.BackupBytes())
	}

	replacement, _ := peerNode(t, "a2", nil)
	res, err := replacement.FetchShards(context.Background(), 12, 2, 0, 4, []string{bAddr}, "job", "secret")
	if err != nil {
		t.Fatalf("FetchShards: %v", err)
	}
	if res.Addr != bAddr || res.Bytes <= 0 {
		t.Fatalf("fetched %d bytes from %s, want some from %s", res.Bytes, res.Addr, bAddr)
	}
	for local := range 2 {
		want, _ := a.arenas.get(local).Valid(12)
		got, ok := replacement.arenas.get(local).Valid(12)
		if !ok || !bytes.Equal(got.Data, want.Data) || !replacement.HoldsShard(local, 12, local, 4) {
			t.Fatalf("local rank %d: the fetched shard differs from the lost node's", local)
		}
	}
	// Fetching again finds both held: nothing moves.
	if res, err := replacement.FetchShards(context.Background(), 12, 2, 0, 4, []string{"127.0.0.1:1"}, "job", "secret"); err != nil || res.Bytes != 0 {
		t.Fatalf("a second FetchShards: %d bytes, %v; want nothing fetched", res.Bytes, err)
	}
}

func equalPairs(a, b [][2]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBackupRefusals: pushes that a backup peer must not keep, and what
// the sender sees.
func TestBackupRefusals(t *testing.T) {
	snap := func(t *testing.T, s *Saver, local, rank int, step int64, mode string) (ckpt.Snapshot, uint32) {
		saveSnapshot(t, s.arenas, local, rank, 4, step, mode)
		sn, _ := s.arenas.get(local).Valid(step)
		crc, err := s.arenas.get(local).Checksum(sn)
		if err != nil {
			t.Fatal(err)
		}
		return sn, crc
	}
	for _, tc := range []struct {
		name    string
		source  string // the node b keeps
		budget  int64
		edit    func(*peer.PushRequest)
		mode    string
		wantErr error
	}{
		{"kept", "a", -1, nil, "sharded", nil},
		{"not b's source", "c", -1, nil, "sharded", peer.ErrRefused},
		{"backups off", "a", 0, nil, "sharded", peer.ErrTooLarge},
		{"over the budget", "a", 4096, nil, "sharded", peer.ErrTooLarge},
		{"an older round", "a", -1, func(r *peer.PushRequest) { r.Round = 2 }, "sharded", peer.ErrRefused},
		{"another rank's metadata", "a", -1, func(r *peer.PushRequest) { r.Rank = 3 }, "sharded", peer.ErrRefused},
		{"a replicated snapshot", "a", -1, nil, "replicated", peer.ErrRefused},
		{"another job's token", "a", -1, func(r *peer.PushRequest) { r.Token = "other" }, "sharded", peer.ErrRefused},
		{"another run", "a", -1, func(r *peer.PushRequest) { r.Run = "other" }, "sharded", peer.ErrRefused},
		{"bytes flipped", "a", -1, func(r *peer.PushRequest) {
			r.Data = bytes.Clone(r.Data)
			r.Data[len(r.Data)/2] ^= 1
		}, "sharded", peer.ErrRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := peerNode(t, "a", nil)
			b, bAddr := peerNode(t, "b", nil)
			b.cfg.BackupBytes = tc.budget
			b.SetBackupPeers(BackupPeers{Round: 3, Source: tc.source})
			sn, crc := snap(t, a, 1, 1, 7, tc.mode)
			req := peer.PushRequest{Addr: bAddr, Run: "job", Token: "secret", Data: sn.Data, CRC: crc,
				Backup: peer.Backup{From: "a", Round: 3, Step: 7, Rank: 1, Local: 1}}
			if tc.edit != nil {
				tc.edit(&req)
			}
			err := peer.Push(context.Background(), req)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Push: %v, want %v", err, tc.wantErr)
			}
			got := backups(b)
			if tc.wantErr == nil && !equalPairs(got, [][2]int64{{7, 1}}) {
				t.Fatalf("b keeps %v, want step 7 of rank 1", got)
			}
			if tc.wantErr != nil && len(got) != 0 {
				t.Fatalf("b keeps %v after a refused push", got)
			}
		})
	}
}

// TestFetchShardsRefusesBadPeers: a backup peer whose answers are damaged,
// cut, for another rank, or absent is refused; the next one is taken; with
// none good nothing is committed.
func TestFetchShardsRefusesBadPeers(t *testing.T) {
	keeper := func(t *testing.T, name string, wrap func(http.Handler) http.Handler, rank int) string {
		src, _ := peerNode(t, "src-"+name, nil)
		saveSnapshot(t, src.arenas, 0, rank, 4, 20, "sharded")
		sn, _ := src.arenas.get(0).Valid(20)
		crc, _ := src.arenas.get(0).Checksum(sn)
		k, addr := peerNode(t, name, wrap)
		k.SetBackupPeers(BackupPeers{Round: 1, Source: "src-" + name})
		if err := peer.Push(context.Background(), peer.PushRequest{Addr: addr, Run: "job", Token: "secret", Data: sn.Data, CRC: crc,
			Backup: peer.Backup{From: "src-" + name, Round: 1, Step: 20, Rank: rank}}); err != nil {
			t.Fatalf("keep a backup on %s: %v", name, err)
		}
		return addr
	}
	flip := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				w = flipping{w}
			}
			h.ServeHTTP(w, r)
		})
	}
	cut := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				w = &cutting{ResponseWriter: w}
			}
			h.ServeHTTP(w, r)
		})
	}
	flipped := keeper(t, "flipped", flip, 2)
	dying := keeper(t, "dying", cut, 2)
	other := keeper(t, "other", nil, 3) // keeps rank 3's, not 2's
	good := keeper(t, "good", nil, 2)

	n, _ := peerNode(t, "new", nil)
	for _, peers := range [][]string{{flipped}, {dying}, {other}, {"127.0.0.1:1"}, {flipped, dying, other}} {
		if _, err := n.FetchShards(context.Background(), 20, 1, 2, 4, peers, "job", "secret"); err == nil {
			t.Fatalf("FetchShards from %v succeeded", peers)
		}
		if inv := n.Inventory(); len(inv) != 0 {
			t.Fatalf("after refused fetches from %v the node holds %v", peers, inv)
		}
	}
	res, err := n.FetchShards(context.Background(), 20, 1, 2, 4, []string{flipped, dying, other, good}, "job", "secret")
	if err != nil || res.Addr != good {
		t.Fatalf("FetchShards with a good peer last: from %s, %v; want it from %s", res.Addr, err, good)
	}
	if inv := n.Inventory(); len(inv) != 1 || inv[0].GetRank() != 2 || inv[0].GetStep() != 20 || inv[0].GetBackup() {
		t.Fatalf("the node holds %v, want its own shard of rank 2, step 20", inv)
	}
}

// cutting ends the connection halfway through the body: a peer that dies
// mid-transfer.
type cutting struct {
	http.ResponseWriter
	written int
}

func (c *cutting) Write(b []byte) (int, error) {
	if c.written > 0 {
		panic(http.ErrAbortHandler)
	}
	half := b[:len(b)/2]
	c.written += len(half)
	c.ResponseWriter.Write(half)
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	panic(http.ErrAbortHandler)
}

// TestDropStaleBackups: a round that restores step 10 from memory drops
// the backups of older rounds past it; one that restores from storage
// drops every older round's; a push of the new round is never dropped,
// even when it arrives before the drop.
func TestDropStaleBackups(t *testing.T) {
	a, _ := peerNode(t, "a", nil)
	b, bAddr := peerNode(t, "b", nil)
	push := func(round int, step int64) {
		t.Helper()
		saveSnapshot(t, a.arenas, 0, 0, 4, step, "sharded")
		sn, _ := a.arenas.get(0).Valid(step)
		crc, _ := a.arenas.get(0).Checksum(sn)
		if err := peer.Push(context.Background(), peer.PushRequest{Addr: bAddr, Run: "job", Token: "secret", Data: sn.Data, CRC: crc,
			Backup: peer.Backup{From: "a", Round: round, Step: step, Rank: 0}}); err != nil {
			t.Fatalf("push step %d of round %d: %v", step, round, err)
		}
	}
	b.SetBackupPeers(BackupPeers{Round: 1, Source: "a"})
	push(1, 10)
	push(1, 11)
	ten := int64(10)
	b.DropStaleBackups(2, &ten)
	if got := backups(b); !equalPairs(got, [][2]int64{{10, 0}}) {
		t.Fatalf("after a round restoring step 10: b keeps %v, want step 10 only", got)
	}
	b.SetBackupPeers(BackupPeers{Round: 3, Source: "a"})
	push(3, 11) // a's workers of round 3 saved before b's round 3 started
	b.DropStaleBackups(3, nil)
	if got := backups(b); !equalPairs(got, [][2]int64{{11, 0}}) {
		t.Fatalf("after a round restoring from storage: b keeps %v, want round 3's step 11 only", got)
	}
	// Inventory reports what a join carries.
	var inv []*roverv1.MemorySnapshot
	for _, m := range b.Inventory() {
		if m.GetBackup() {
			inv = append(inv, m)
		}
	}
	if len(inv) != 1 || inv[0].GetMode() != "sharded" || inv[0].GetWorldSize() != 4 {
		t.Fatalf("b's inventory of backups %v", inv)
	}
}
