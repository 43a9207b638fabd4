package runconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/rendezvous"
)

// TestLimitsMatchTheMaster pins the bounds to what the master accepts, so
// that a value the command line lets through is never refused later.
func TestLimitsMatchTheMaster(t *testing.T) {
	if MaxNodes != rendezvous.MaxNodesLimit {
		t.Errorf("MaxNodes = %d, the rendezvous allows %d", MaxNodes, rendezvous.MaxNodesLimit)
	}
	if MaxNprocPerNode != rendezvous.MaxLocalWorldSize {
		t.Errorf("MaxNprocPerNode = %d, the rendezvous allows %d", MaxNprocPerNode, rendezvous.MaxLocalWorldSize)
	}
	if MaxDuration != 30*24*time.Hour {
		t.Errorf("MaxDuration = %v, docs/security.md says 30 days", MaxDuration)
	}
}

// TestBounds gives every numeric and duration flag of `rover run` its
// largest value (accepted) and one past it (refused, naming the flag).
func TestBounds(t *testing.T) {
	ep := "--rdzv-endpoint=m"
	tests := []struct {
		name    string
		ok, bad []string // the flags before train.py
		want    string   // in the error of bad
	}{
		{"nnodes", []string{"--nnodes=1048576", ep}, []string{"--nnodes=2000000", ep}, "--nnodes=2000000: at most 1048576 nodes"},
		{"nnodes range", []string{"--nnodes=1:1048576", ep}, []string{"--nnodes=1:1048577", ep}, "--nnodes=1:1048577: at most 1048576 nodes"},
		{"nproc-per-node", []string{"--nproc-per-node=4096"}, []string{"--nproc-per-node=100000"}, "--nproc-per-node=100000: want 1 to 4096"},
		{"node-unit", []string{"--nnodes=8", "--node-unit=8", ep}, []string{"--nnodes=8", "--node-unit=9", ep}, "--node-unit=9 is more than the maximum of 8 nodes"},
		{"max-restarts", []string{"--max-restarts=1048576"}, []string{"--max-restarts=1048577"}, "--max-restarts=1048577: must be 0 to 1048576"},
		{"node-rank", []string{"--nnodes=4", "--node-rank=3", ep}, []string{"--nnodes=4", "--node-rank=4", ep}, "--node-rank=4 is out of range: use 0 to 3"},
		{"master-port", []string{"--master-port=65535"}, []string{"--master-port=65536"}, "--master-port: port 65536 is out of range"},
		{"training-port", []string{"--training-port=65535"}, []string{"--training-port=70000"}, "--training-port: port 70000 is out of range"},
		{"checkpoint-keep", []string{"--checkpoint-keep=1048576"}, []string{"--checkpoint-keep=1048577"}, "--checkpoint-keep=1048577: want 0 (keep all) to 1048576"},
		{"precheck", []string{"--precheck=2"}, []string{"--precheck=3"}, "--precheck=3: want 0"},
		{"hang-detection", []string{"--hang-detection=2"}, []string{"--hang-detection=3"}, "--hang-detection=3: want 0"},
		{"hang-downtime", []string{"--hang-downtime=43200"}, []string{"--hang-downtime=43201"}, "--hang-downtime=43201: want whole minutes from 1 to 43200"},
		{"hang-timeout", []string{"--hang-timeout=720h"}, []string{"--hang-timeout=100000h"}, "--hang-timeout=100000h0m0s: must be at most 720h (30 days)"},
		{"monitor-interval", []string{"--monitor-interval=720h"}, []string{"--monitor-interval=721h"}, "--monitor-interval=721h0m0s: must be at most 720h"},
		{"stop-grace-period", []string{"--stop-grace-period=720h"}, []string{"--stop-grace-period=800h"}, "--stop-grace-period=800h0m0s: must be at most 720h"},
		{"heartbeat-interval", []string{"--heartbeat-interval=1s"}, []string{"--heartbeat-interval=721h"}, "--heartbeat-interval=721h0m0s: must be at most 720h"},
		{"join_timeout", []string{"--rdzv-conf=join_timeout=2592000"}, []string{"--rdzv-conf=join_timeout=2592001"}, "--rdzv-conf join_timeout=720h0m1s: must be at most 720h"},
		{"last_call_timeout", []string{"--rdzv-conf=last_call_timeout=720h"}, []string{"--rdzv-conf=lastcall_timeout=721h"}, "--rdzv-conf last_call_timeout=721h0m0s: must be at most"},
		{"heartbeat_timeout", []string{"--rdzv-conf=heartbeat_timeout=720h"}, []string{"--rdzv-conf=heartbeat_timeout=721h"}, "--rdzv-conf heartbeat_timeout=721h0m0s: must be at most"},
		{"disconnect_grace", []string{"--rdzv-conf=disconnect_grace=720h"}, []string{"--rdzv-conf=disconnect_grace=721h"}, "--rdzv-conf disconnect_grace=721h0m0s: must be at most"},
		{"close_timeout", []string{"--rdzv-conf=close_timeout=720h"}, []string{"--rdzv-conf=close_timeout=721h"}, "--rdzv-conf close_timeout=721h0m0s: must be at most"},
		{"master_timeout", []string{"--rdzv-conf=master_timeout=720h"}, []string{"--rdzv-conf=master_timeout=721h"}, "--rdzv-conf master_timeout=721h0m0s: must be at most"},
		{"hang_timeout", []string{"--rdzv-conf=hang_timeout=720h"}, []string{"--rdzv-conf=hang_timeout=721h"}, "--hang-timeout=721h0m0s: must be at most"},
		{"pend_timeout", []string{"--rdzv-conf=pend_timeout=720h"}, []string{"--rdzv-conf=pend_timeout=721h"}, "--rdzv-conf pend_timeout=721h0m0s: must be at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParser(nil, 0)
			if _, err := p.Parse(append(tt.ok, "train.py")); err != nil {
				t.Errorf("Parse(%q) = %v, want it accepted: it is at the bound", tt.ok, err)
			}
			_, err := p.Parse(append(tt.bad, "train.py"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.bad, err, tt.want)
			}
		})
	}
}

// TestBoundsAllAtOnce checks that every value out of range is reported in
// one error.
func TestBoundsAllAtOnce(t *testing.T) {
	_, err := testParser(nil, 0).Parse([]string{"--nnodes=2000000", "--rdzv-endpoint=m", "--nproc-per-node=100000",
		"--hang-timeout=100000h", "--max-restarts=99999999", "train.py"})
	if err == nil {
		t.Fatal("Parse accepted values out of range")
	}
	for _, w := range []string{"--nnodes=2000000", "--nproc-per-node=100000", "--hang-timeout=100000h", "--max-restarts=99999999"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not name %s:\n%v", w, err)
		}
	}
}

func TestCheckEnvVar(t *testing.T) {
	tests := []struct {
		name, value, want string // want "": accepted
	}{
		{"PATH", "/usr/bin", ""},
		{"EMPTY", "", ""},
		{"", "x", "envs[0]: the environment variable has no name"},
		{"A=B", "x", `envs[0]: environment variable name "A=B" holds "="`},
		{"A\x00", "x", "holds a NUL byte; a name cannot"},
		{"TOKEN", "abc\x00def", "envs[0]: the value of TOKEN holds a NUL byte, which no process environment can carry; remove it"},
	}
	for _, tt := range tests {
		err := CheckEnvVar("envs[0]", tt.name, tt.value)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckEnvVar(%q, %q) = %v, want nil", tt.name, tt.value, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckEnvVar(%q, %q) = %v, want %q", tt.name, tt.value, err, tt.want)
		}
	}
}
