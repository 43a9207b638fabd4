package master

import (
	"strings"
	"testing"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

func TestValidateSnapshots(t *testing.T) {
	snap := func(local int32, step int64, rank, world int32, mode string) *roverv1.MemorySnapshot {
		return &roverv1.MemorySnapshot{LocalRank: local, Step: step, Rank: rank, WorldSize: world, Mode: mode}
	}
	for _, tc := range []struct {
		snap *roverv1.MemorySnapshot
		want string // in the error; "" for valid
	}{
		{snap(1, 5, 3, 4, "sharded"), ""},
		{snap(0, 0, 0, 1, "replicated"), ""},
		{snap(2, 5, 0, 4, "sharded"), "local_rank 2"},
		{snap(-1, 5, 0, 4, "sharded"), "local_rank -1"},
		{snap(0, -5, 0, 4, "sharded"), "step -5"},
		{snap(0, 5, 4, 4, "sharded"), "rank 4"},
		{snap(0, 5, 0, 0, "sharded"), "world of size 0"},
		{snap(0, 5, 0, 4, "mirrored"), `mode "mirrored"`},
	} {
		req := &roverv1.JoinRequest{LocalWorldSize: 2, Snapshots: []*roverv1.MemorySnapshot{tc.snap}}
		_, err := validateSnapshots(req)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.snap, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one naming %q", tc.snap, err, tc.want)
		}
	}
	many := &roverv1.JoinRequest{LocalWorldSize: 1}
	for range maxSnapshotsPerRank + 1 {
		many.Snapshots = append(many.Snapshots, snap(0, 1, 0, 1, "sharded"))
	}
	if _, err := validateSnapshots(many); err == nil {
		t.Error("an oversized snapshot list was accepted")
	}
}

func TestValidatePeerAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, want string // want: in the error; "" for valid
	}{
		{"", ""},
		{"10.0.0.7:40123", ""},
		{"node-1.example:9", ""},
		{"[::1]:80", ""},
		{"10.0.0.7", "want host:port"},
		{":80", "want a host"},
		{"h:0", "a port from 1"},
		{"h:70000", "a port from 1"},
		{"h:http", "a port from 1"},
		{strings.Repeat("h", 400) + ":1", "at most 300"},
	} {
		_, err := validatePeerAddr(&roverv1.JoinRequest{PeerAddr: tc.addr})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.addr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one naming %q", tc.addr, err, tc.want)
		}
	}
}
