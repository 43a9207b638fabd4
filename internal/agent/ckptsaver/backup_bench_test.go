package ckptsaver

import (
	"context"
	"strconv"
	"testing"

	"github.com/roverml/rover/internal/ckpt"
)

// benchShard is the size of the shard the backup benchmarks save and
// push: 256 MiB, one local rank's part of a sharded state.
const benchShard = 256 << 20

// saveShard writes a benchShard-sized sharded snapshot of step into
// local's arena, as a worker's save does (the copy into the slot), and
// commits it.
func saveShard(b *testing.B, ar *arenas, local int, step int64, payload []byte) {
	tensors := []ckpt.Tensor{{Name: "w", DType: "U8", Shape: []int64{int64(len(payload))}, Data: payload}}
	meta := map[string]string{ckpt.MetaStep: strconv.FormatInt(step, 10), ckpt.MetaRank: "0",
		ckpt.MetaWorldSize: "2", ckpt.MetaMode: string(ckpt.Sharded)}
	l, err := ckpt.NewLayout(tensors, meta)
	if err != nil {
		b.Fatal(err)
	}
	_, _, slot, err := ar.begin(local, step, l.Size)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Place(slot, tensors); err != nil {
		b.Fatal(err)
	}
	if err := ar.commit(local, step, l.Size); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBackupPush measures the backup ring's costs (docs/benchmarks.md,
// "Backup peers"): a 256 MiB shard pushed from one agent's arena to its
// backup peer's over loopback (the pusher's path: the sender's CRC32C, one
// HTTP/1.1 PUT written on a thread that yields to training, the receiver's
// CRC32C and metadata check, into its double-buffered backup arena), the
// shared memory that backup takes, and what a save costs (its copy into
// the slot, what a worker blocks on) alone and while the previous save's
// push reads the other slot (the pushes' count says every one completed).
//
//	go test ./internal/agent/ckptsaver/ -run '^$' -bench BackupPush -benchtime 5x
func BenchmarkBackupPush(b *testing.B) {
	payload := make([]byte, benchShard)
	for i := range payload {
		payload[i] = byte(i * 31)
	}
	node := func(b *testing.B, name string) (*Saver, string) {
		s, addr := peerNode(b, name, nil)
		b.Cleanup(s.backups.close) // before peerNode's, which removes the directory
		return s, addr
	}
	b.Run("push", func(b *testing.B) {
		a, _ := node(b, "bench-a")
		k, kAddr := node(b, "bench-b")
		a.cfg.Round = func() int { return 1 }
		a.SetBackupPeers(BackupPeers{Round: 1, PeerNode: "bench-b", Addr: kAddr, Run: "job", Token: "secret"})
		k.SetBackupPeers(BackupPeers{Round: 1, Source: "bench-a"})
		k.cfg.BackupBytes = 4 * benchShard
		saveShard(b, a.arenas, 0, 0, payload)
		b.SetBytes(benchShard)
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			saveShard(b, a.arenas, 0, int64(i+1), payload) // a fresh snapshot: its CRC32C is not known yet
			b.StartTimer()
			n, err := a.pusher.push(context.Background(), a.pusher.target, "job", "secret", 0, pendingPush{step: int64(i + 1), round: 1})
			if err != nil || n == 0 {
				b.Fatalf("push: %d bytes, %v", n, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(k.BackupBytes()), "backup-shm-bytes")
	})
	for _, pushing := range []bool{false, true} {
		name := "save-alone"
		if pushing {
			name = "save-while-pushing"
		}
		b.Run(name, func(b *testing.B) {
			a, _ := node(b, "bench-c")
			k, kAddr := node(b, "bench-d")
			a.SetBackupPeers(BackupPeers{Round: 1, PeerNode: "bench-d", Addr: kAddr, Run: "job", Token: "secret"})
			k.SetBackupPeers(BackupPeers{Round: 1, Source: "bench-c"})
			k.cfg.BackupBytes = 4 * benchShard
			saveShard(b, a.arenas, 0, 0, payload) // the arena exists: steady saves
			pushes := 0
			b.SetBytes(benchShard)
			b.ResetTimer()
			for i := range b.N {
				// The previous save's push reads its slot while this save
				// writes the other one, as after a step's save.
				var n int64
				var err error
				pushed := make(chan struct{})
				if pushing {
					go func() {
						defer close(pushed)
						yieldingRun(func() {
							n, err = a.pusher.push(context.Background(), a.pusher.target, "job", "secret", 0, pendingPush{step: int64(i), round: 1})
						})
					}()
				} else {
					close(pushed)
				}
				saveShard(b, a.arenas, 0, int64(i+1), payload)
				b.StopTimer()
				<-pushed
				if err != nil {
					b.Fatal(err)
				}
				if n > 0 {
					pushes++
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(pushes), "pushes")
		})
	}
}
