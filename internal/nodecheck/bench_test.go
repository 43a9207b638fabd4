package nodecheck

import (
	"testing"
	"time"
)

// BenchmarkCheck1000 runs a whole check of 1,000 nodes, one of them faulty
// and one slow (two stages): the master's CPU per check.
func BenchmarkCheck1000(b *testing.B) {
	nodes := names(1000)
	times := evenTimes(nodes, 100*time.Millisecond)
	times["n500"] = 5 * time.Second
	cl := cluster{times: times, bad: "n123", kind: crash}
	t := &testing.T{}
	b.ReportAllocs()
	for b.Loop() {
		drive(t, New(Config{MinNodes: 1}), cl, nodes)
	}
}
