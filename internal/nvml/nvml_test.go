package nvml

import (
	"errors"
	"os"
	"testing"
)

// TestOpen: on a node with NVIDIA GPUs and a rover built with the nvml tag,
// Open samples every GPU; elsewhere it fails and says why (this machine has
// no GPU, so CI checks the failure: the agent then runs without a monitor).
func TestOpen(t *testing.T) {
	m, err := Open()
	_, gpuNode := os.Stat("/dev/nvidia0")
	if err != nil {
		if gpuNode == nil && !errors.Is(err, ErrNotBuilt) {
			t.Fatalf("Open on a GPU node = %v", err)
		}
		if err.Error() == "" {
			t.Fatal("Open failed without saying why")
		}
		t.Logf("Open = %v (no GPU here, or built without the nvml tag)", err)
		return
	}
	defer m.Close()
	ss, err := m.Sample()
	if err != nil || len(ss) == 0 {
		t.Fatalf("Sample = %v, %v; want a sample per GPU", ss, err)
	}
	for i, s := range ss {
		if s.Index != i || s.Utilization < -1 || s.Utilization > 100 {
			t.Errorf("sample %d: %+v", i, s)
		}
	}
}
