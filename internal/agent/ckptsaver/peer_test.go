package ckptsaver

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/roverml/rover/internal/ckpt/peer"
)

// peerNode is one node's saver, its arenas serving peers on a loopback
// port with the handler wrap makes of the saver's (nil: as it is).
func peerNode(t testing.TB, node string, wrap func(http.Handler) http.Handler) (*Saver, string) {
	t.Helper()
	ar, err := newArenas(JobKey("job", "secret-"+node), Owner{NodeID: node}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ar.close(); os.RemoveAll(ar.dir.path) })
	s := &Saver{arenas: ar, cfg: Config{NodeID: node, BackupBytes: -1, Log: slog.New(slog.DiscardHandler)}}
	s.initBackups(false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := s.PeerHandler("job", "secret")
	if wrap != nil {
		h = wrap(h)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s, ln.Addr().String()
}

// flipping flips a byte in the middle of every response body.
type flipping struct{ http.ResponseWriter }

func (f flipping) Write(b []byte) (int, error) {
	if len(b) > 8 {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 1
	}
	return f.ResponseWriter.Write(b)
}

func TestFetchFromPeers(t *testing.T) {
	survivor, addr := peerNode(t, "a", nil)
	saveSnapshot(t, survivor.arenas, 0, 0, 4, 24, "replicated")
	saveSnapshot(t, survivor.arenas, 0, 0, 4, 25, "replicated")
	// b holds the step too, but its answers arrive damaged.
	damaged, flipper := peerNode(t, "b", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(flipping{w}, r) })
	})
	saveSnapshot(t, damaged.arenas, 0, 0, 4, 25, "replicated")
	newcomer, _ := peerNode(t, "c", nil)

	// A damaged copy is refused; the next peer's is taken.
	res, err := newcomer.FetchFromPeers(context.Background(), 25, []string{flipper, addr}, "job", "secret")
	if err != nil {
		t.Fatalf("FetchFromPeers: %v", err)
	}
	if res.Addr != addr || !newcomer.HoldsReplicated(25) {
		t.Fatalf("fetched from %s, holds step 25: %v; want it from %s", res.Addr, newcomer.HoldsReplicated(25), addr)
	}
	want, _ := survivor.arenas.get(0).Valid(25)
	got, _ := newcomer.arenas.get(0).Valid(25)
	if !bytes.Equal(got.Data, want.Data) {
		t.Fatal("the fetched snapshot differs from the survivor's")
	}
	inv := newcomer.Inventory()
	if len(inv) != 1 || inv[0].GetStep() != 25 || inv[0].GetMode() != "replicated" {
		t.Fatalf("newcomer's inventory %v, want step 25, replicated", inv)
	}

	// Steps nobody serves, sharded snapshots, wrong tokens: nothing lands.
	sharded, shardAddr := peerNode(t, "d", nil)
	saveSnapshot(t, sharded.arenas, 0, 1, 4, 30, "sharded")
	empty, _ := peerNode(t, "e", nil)
	for _, tc := range []struct {
		name  string
		step  int64
		peers []string
		token string
		want  error
	}{
		{"step not held", 26, []string{addr}, "secret", peer.ErrRefused},
		{"damaged only", 25, []string{flipper}, "secret", peer.ErrCorrupt},
		{"sharded is not served", 30, []string{shardAddr}, "secret", peer.ErrRefused},
		{"wrong token", 25, []string{addr}, "guess", peer.ErrRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := empty.FetchFromPeers(context.Background(), tc.step, tc.peers, "job", tc.token)
			if !errors.Is(err, tc.want) {
				t.Fatalf("FetchFromPeers: %v, want %v", err, tc.want)
			}
			if inv := empty.Inventory(); len(inv) != 0 {
				t.Fatalf("after a refused fetch the node holds %v", inv)
			}
		})
	}
}
