package proc

import (
	"os"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	line := "4242 (python3 (a) b) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 1 0 100 1000 10\n"
	got, ok := parseStatCPU([]byte(line))
	if !ok || got != 3.1 {
		t.Errorf("parseStatCPU = %v, %v; want 3.1 s (utime 250 + stime 50 + children 7 + 3 ticks)", got, ok)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 u 0 0 0 0"} {
		if _, ok := parseStatCPU([]byte(bad)); ok {
			t.Errorf("parseStatCPU(%q) accepted", bad)
		}
	}
}

// TestCPUSecondsGrows: this process's CPU time grows as it spins.
func TestCPUSecondsGrows(t *testing.T) {
	before, ok := CPUSeconds(os.Getpid())
	if !ok {
		t.Fatal("no CPU time for this process")
	}
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		if after, _ := CPUSeconds(os.Getpid()); after > before {
			break
		}
	}
	_ = x
	if _, ok := CPUSeconds(-1); ok {
		t.Error("CPUSeconds of pid -1 succeeded")
	}
}
