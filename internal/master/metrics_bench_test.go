package master

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/roverml/rover/internal/metrics"
	"github.com/roverml/rover/internal/store"
)

// BenchmarkScrapeMaster scrapes the metrics of a master whose job has
// 10,000 nodes in its world, as Prometheus does (GET /metrics, the text
// format), and reports the master's CPU time per scrape (cpu-ms/scrape,
// from getrusage: every thread's, the Go runtime's included) and the
// exposition's size. Target: under 100 ms (docs/benchmarks.md).
//
//	go test -run '^$' -bench ScrapeMaster -benchtime 20x ./internal/master/
func BenchmarkScrapeMaster(b *testing.B) {
	const nodes = 10_000
	now := time.Unix(1_700_000_000, 0)
	c := restoredCore(b, store.NewMemory(), nodes, now)
	for i := range nodes {
		joinNode(b, c, fmt.Sprintf("node-%05d", i), nodes, 1, now)
	}
	if j := c.job(); j.GetRoundOpen() || len(j.GetNodes()) != nodes {
		b.Fatalf("round open %v with %d nodes; want a world of %d", j.GetRoundOpen(), len(j.GetNodes()), nodes)
	}
	m := &Master{cfg: Config{Clock: realClock{}}, core: c, checkpoints: newCheckpoints(realClock{}, slog.New(slog.DiscardHandler))}
	h := promhttp.HandlerFor(metrics.NewMaster(m.metricsSnapshot, true).Registry(), promhttp.HandlerOpts{})
	scrape := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if w.Code != 200 {
			b.Fatalf("scrape: %d %s", w.Code, w.Body)
		}
		return w.Body.Len()
	}
	size := scrape()
	b.ResetTimer()
	start := cpuTime(b)
	for b.Loop() {
		scrape()
	}
	b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/1000/float64(b.N), "cpu-ms/scrape")
	b.ReportMetric(float64(size), "bytes/scrape")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkJobStatus is GetJob's answer (Master.Status, which the web
// dashboard on the metrics address reads once a second) for a job of
// 10,000 nodes in its world.
//
//	go test -run '^$' -bench JobStatus -benchtime 20x ./internal/master/
func BenchmarkJobStatus(b *testing.B) {
	const nodes = 10_000
	now := time.Unix(1_700_000_000, 0)
	c := restoredCore(b, store.NewMemory(), nodes, now)
	for i := range nodes {
		joinNode(b, c, fmt.Sprintf("node-%05d", i), nodes, 1, now)
	}
	for b.Loop() {
		if j := c.jobAt(now); len(j.GetNodes()) != nodes {
			b.Fatalf("%d nodes", len(j.GetNodes()))
		}
	}
}
