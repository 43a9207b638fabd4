package store

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// benchRecord is a record of about the size of the master's.
var benchRecord = bytes.Repeat([]byte("r"), 200)

// BenchmarkAppend appends groups of 200-byte records with real fsyncs: one
// op is one group, one transaction.
func BenchmarkAppend(b *testing.B) {
	for _, group := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			s := mustOpen(b, b.TempDir(), Options{})
			recs := make([][]byte, group)
			for i := range recs {
				recs[i] = benchRecord
			}
			ctx := context.Background()
			b.SetBytes(int64(group * len(benchRecord)))
			for b.Loop() {
				if err := s.Append(ctx, recs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*group)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkLoad loads a 50 MB snapshot and the 10,000 records after it.
func BenchmarkLoad(b *testing.B) {
	const snapshotBytes, records = 50 << 20, 10000
	dir := b.TempDir()
	s := mustOpen(b, dir, Options{NoSync: true})
	mustSnapshot(b, s, string(bytes.Repeat([]byte("s"), snapshotBytes)))
	for i := 0; i < records; i += 250 {
		g := make([][]byte, 250)
		for j := range g {
			g[j] = benchRecord
		}
		mustAppend(b, s, g)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	s = mustOpen(b, dir, Options{})
	st, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetBytes(int64(snapshotBytes + records*len(benchRecord)))
	for b.Loop() {
		c, err := s.Load(ctx)
		if err != nil || len(c.Records) != records {
			b.Fatalf("Load = %d records, %v", len(c.Records), err)
		}
	}
	b.ReportMetric(float64(st.FileBytes)/(1<<20), "file-MB")
}
