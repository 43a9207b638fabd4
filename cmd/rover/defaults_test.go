package main

import (
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/runconfig"
)

// TestDefaultPolicyAgrees: `rover master --nnodes` presets and `rover run`
// fix the same policy when neither is given a setting, and a frozen node
// (its session open, no heartbeats) is declared dead in tens of seconds,
// with a timeout several heartbeats long.
func TestDefaultPolicyAgrees(t *testing.T) {
	run, err := runconfig.Parse([]string{"--nnodes", "2", "--rdzv-endpoint", "m:7000", "--no-python", "true"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	mc, err := parseMasterFlags([]string{"--nnodes", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(run.Policy(), *mc.Preset); diff != "" {
		t.Errorf("rover run and rover master defaults differ (-run +master):\n%s", diff)
	}
	if run.HeartbeatTimeout != 30*time.Second || run.HeartbeatInterval != 5*time.Second {
		t.Errorf("heartbeat timeout %v, interval %v; want 30s and 5s", run.HeartbeatTimeout, run.HeartbeatInterval)
	}
	if run.HeartbeatTimeout < 3*run.HeartbeatInterval {
		t.Errorf("heartbeat timeout %v is under three intervals of %v", run.HeartbeatTimeout, run.HeartbeatInterval)
	}
	if run.MasterTimeout != 600*time.Second {
		t.Errorf("master_timeout %v, want 600s: an agent rides out a master restart", run.MasterTimeout)
	}
}
