package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var rover string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rover-bench-test-")
	if err != nil {
		panic(err)
	}
	rover = filepath.Join(dir, "rover")
	if out, err := exec.Command("go", "build", "-o", rover, "github.com/roverml/rover/cmd/rover").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build rover: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The benchmarks must keep working: small runs check their figures.
func TestRendezvousBenchmarkRuns(t *testing.T) {
	var out bytes.Buffer
	res, err := Rendezvous(context.Background(), RendezvousConfig{Nodes: 50, Rover: rover, Conns: 4,
		HeartbeatPeriod: 200 * time.Millisecond, Periods: 1}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.Nodes != 50 || res.RoundSeconds <= 0 || res.HeartbeatsPerSecond <= 0 || res.MasterRSSBytes <= 0 {
		t.Errorf("figures %+v", res)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, `{"nodes":50,`) {
		t.Errorf("last line %q is not the JSON result", last)
	}
}

func TestShardsBenchmarkRuns(t *testing.T) {
	for _, agents := range []int{0, 2} {
		t.Run(fmt.Sprintf("agents=%d", agents), func(t *testing.T) {
			var out bytes.Buffer
			res, err := Shards(context.Background(), ShardsConfig{Clients: 8, Batch: 4, Agents: agents, Duration: 300 * time.Millisecond, Rover: rover}, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if res.Clients != 8 || res.Agents != agents || res.LeasesPerSecond <= 0 || res.P99LeaseMillis <= 0 || res.MasterCallsPerSecond <= 0 {
				t.Errorf("figures %+v", res)
			}
		})
	}
}
