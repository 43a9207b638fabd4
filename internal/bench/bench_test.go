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
	for _, tt := range []struct {
		agents  int
		size    int64
		shuffle bool
	}{{0, 0, false}, {2, 0, false}, {0, 1 << 32, true}} {
		t.Run(fmt.Sprintf("agents=%d,size=%d,shuffle=%v", tt.agents, tt.size, tt.shuffle), func(t *testing.T) {
			var out bytes.Buffer
			res, err := Shards(context.Background(), ShardsConfig{Clients: 8, Batch: 4, Agents: tt.agents, Duration: 300 * time.Millisecond, Rover: rover,
				Size: tt.size, ShardSize: 64, Shuffle: tt.shuffle}, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if res.Clients != 8 || res.Agents != tt.agents || res.LeasesPerSecond <= 0 || res.P99LeaseMillis <= 0 || res.MasterCallsPerSecond <= 0 {
				t.Errorf("figures %+v", res)
			}
			if res.Shuffle != tt.shuffle || res.ShardSize != 64 || res.Size < 1 || res.FirstLeaseMillis <= 0 || res.GetJobCalls < 1 ||
				res.P99GetJobMillis <= 0 || res.MasterPeakRSS <= 0 {
				t.Errorf("dataset figures %+v", res)
			}
		})
	}
}
