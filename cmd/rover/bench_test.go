package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/bench"
)

// TestBenchFlags: each `rover bench` benchmark's defaults, and its refusals
// (usage errors, every problem at once).
func TestBenchFlags(t *testing.T) {
	rdzv, err := parseBenchRendezvous(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&bench.RendezvousConfig{Nodes: 1000, Conns: 16, HeartbeatPeriod: time.Second, Periods: 3}, rdzv); diff != "" {
		t.Errorf("rover bench rendezvous defaults (-want +got):\n%s", diff)
	}
	shards, err := parseBenchShards(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&bench.ShardsConfig{Clients: 256, Batch: 1, Duration: 5 * time.Second, Conns: 16, Size: 1 << 24, ShardSize: 1}, shards); diff != "" {
		t.Errorf("rover bench shards defaults (-want +got):\n%s", diff)
	}
	recovery, err := parseBenchRecovery(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&bench.RecoveryConfig{Nodes: 1000, Shards: 1_000_000}, recovery); diff != "" {
		t.Errorf("rover bench recovery defaults (-want +got):\n%s", diff)
	}

	tests := []struct {
		name  string
		parse func([]string, io.Writer) error
		args  []string
		want  []string // every line of the error
	}{
		{"rendezvous without nodes", parseAs(parseBenchRendezvous), []string{"--nodes", "0"}, []string{"--nodes must be at least 1, got 0"}},
		{"rendezvous, unknown flag", parseAs(parseBenchRendezvous), []string{"--bogus"}, []string{"flag provided but not defined: -bogus"}},
		{"shards, every problem", parseAs(parseBenchShards), []string{"--clients", "0", "--agents", "5", "--size", "0", "--shard-size", "0"},
			[]string{"--clients must be at least 1, got 0",
				"--agents must be 0 to --clients (0), got 5",
				"--size must be 1 to 4611686018427387904, got 0",
				"--shard-size must be 1 to 4611686018427387904, got 0"}},
		{"shards, a shuffled shard too large", parseAs(parseBenchShards), []string{"--shuffle", "--shard-size", "100000000"},
			[]string{"--shard-size must be 1 to 524288, got 100000000"}},
		{"recovery too small", parseAs(parseBenchRecovery), []string{"--nodes", "0", "--shards", "1"},
			[]string{"--nodes must be at least 1 and --shards at least 2, got 0 and 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse(tt.args, io.Discard)
			if _, ok := err.(usageError); !ok {
				t.Fatalf("parse(%q) = %v (%T), want a usage error (exit 2)", tt.args, err, err)
			}
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("parse(%q) errors (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

// parseAs drops the config of a parse func.
func parseAs[C any](parse func([]string, io.Writer) (*C, error)) func([]string, io.Writer) error {
	return func(args []string, w io.Writer) error { _, err := parse(args, w); return err }
}
