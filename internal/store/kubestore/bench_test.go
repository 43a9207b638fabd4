package kubestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/roverml/rover/internal/store"
)

// BenchmarkAppend appends groups of 200-byte records, the size of the
// master's, to a real API server (etcd on the local disk): one op is one
// group, one compare-and-swap of the head. When the head is full it
// snapshots a 64 KiB state, as the master does, and that is counted.
func BenchmarkAppend(b *testing.B) {
	c := startCluster(b)
	ctx := context.Background()
	rec := bytes.Repeat([]byte("r"), 200)
	state := random(64<<10, 7)
	for _, group := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			s := c.open(b, nil, c.name("bench"))
			recs := make([][]byte, group)
			for i := range recs {
				recs[i] = rec
			}
			snapshots := 0
			b.SetBytes(int64(group * len(rec)))
			for b.Loop() {
				err := s.Append(ctx, recs)
				if errors.Is(err, store.ErrFull) {
					snapshots++
					if err = s.Snapshot(ctx, state); err == nil {
						err = s.Append(ctx, recs)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*group)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(snapshots)/float64(b.N), "snapshots/op")
		})
	}
}
