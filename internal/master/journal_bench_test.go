package master

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
	"github.com/roverml/rover/internal/store"
)

// BenchmarkJournalHour simulates an hour of a job on a durable store: 32
// workers on 4 nodes heartbeat every second with their progress (which the
// goodput accounting takes) and each leases and completes one shard a
// second, through their agents' batches. It reports the store file's peak
// and final size next to the bytes journaled in all (every record the store
// took, the goodput records among them, and those alone): snapshots keep the
// file bounded by the state, not by the job's age. fsync is off (the size is
// the point, not the speed).
//
//	go test -run '^$' -bench JournalHour ./internal/master/
func BenchmarkJournalHour(b *testing.B) {
	for range b.N {
		ctx := context.Background()
		st, err := store.Open(b.TempDir(), store.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		now := time.Unix(1000, 0)
		counted := &countingStore{Store: st}
		c := restoredCore(b, counted, 4, now)
		for n := range 4 {
			joinNode(b, c, fmt.Sprint("node", n), 4, 0, now)
		}
		ds := shard.Dataset{Name: "train", Size: 1 << 40, BatchSize: 32, ShardSize: 1024, Epochs: 1, Mode: shard.Leased}
		if _, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventRegisterDataset, Time: now, Shard: &jobstate.ShardEvent{Dataset: "train", Spec: &ds}}); err != nil {
			b.Fatal(err)
		}
		held := map[string]uint64{}
		var peak int64
		for sec := range 3600 {
			now = now.Add(time.Second)
			for n := range 4 {
				node := fmt.Sprint("node", n)
				if err := c.seen(node, now); err != nil {
					b.Fatal(err)
				}
				hb := &roverv1.Heartbeat{SentUnixNanos: now.UnixNano(), Progress: &roverv1.NodeProgress{Round: 1}}
				for w := range 8 {
					hb.Progress.Workers = append(hb.Progress.Workers, &roverv1.WorkerProgress{LocalRank: int32(w), Step: int64(sec), StepUnixNanos: now.UnixNano()})
				}
				c.goodputHeartbeat(node, hb, now)
				var ops []jobstate.BatchOp
				for w := range 8 {
					worker := fmt.Sprintf("%s/%d", node, w)
					if id, ok := held[worker]; ok {
						ops = append(ops, jobstate.BatchOp{Type: jobstate.BatchComplete, Shard: &jobstate.ShardEvent{Dataset: "train", Worker: worker, Results: []jobstate.ShardResult{{ID: id, OK: true}}}})
					}
					ops = append(ops, jobstate.BatchOp{Type: jobstate.BatchLease, Shard: &jobstate.ShardEvent{Dataset: "train", Worker: worker, Max: 1}})
				}
				outs, errs, err := c.shardBatch(ctx, now, ops)
				if err != nil {
					b.Fatal(err)
				}
				for i, op := range ops {
					if op.Type == jobstate.BatchLease && errs[i] == nil && len(outs[i].Lease.Shards) == 1 {
						held[op.Shard.Worker] = outs[i].Lease.Shards[0].ID
					}
				}
			}
			if err := c.tick(ctx, now); err != nil {
				b.Fatal(err)
			}
			if sec%60 == 59 {
				s, err := st.Stats()
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, s.FileBytes)
			}
		}
		s, _ := st.Stats()
		b.ReportMetric(float64(counted.bytes)/1e6, "MB-journaled")
		b.ReportMetric(float64(counted.goodput)/1e6, "MB-goodput-records")
		b.ReportMetric(float64(peak)/1e6, "MB-peak-file")
		b.ReportMetric(float64(s.FileBytes)/1e6, "MB-final-file")
		b.ReportMetric(float64(s.SnapshotBytes)/1e3, "kB-snapshot")
		st.Close()
	}
}

// countingStore counts the bytes appended to a Store, and those of the
// goodput records among them.
type countingStore struct {
	Store
	bytes, goodput int64
}

func (s *countingStore) Append(ctx context.Context, recs [][]byte) error {
	for _, r := range recs {
		s.bytes += int64(len(r))
		if bytes.Contains(r, []byte(`"type":"goodput"`)) {
			s.goodput += int64(len(r))
		}
	}
	return s.Store.Append(ctx, recs)
}
