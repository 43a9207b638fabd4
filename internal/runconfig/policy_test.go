package runconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPolicyCheck(t *testing.T) {
	valid := Policy{MinNodes: 1, MaxNodes: 4, NodeUnit: 2, MaxRestarts: 3, JoinTimeout: time.Minute,
		LastCallTimeout: time.Second, HeartbeatTimeout: time.Minute, DisconnectGrace: 0}
	tests := []struct {
		name string
		mod  func(*Policy)
		want []string // every message, in order
	}{
		{"valid", nil, nil},
		{"nnodes zero", func(p *Policy) { p.MinNodes, p.MaxNodes = 0, 0 },
			[]string{"--nnodes=0: the minimum number of nodes must be at least 1, not 0"}},
		{"nnodes reversed", func(p *Policy) { p.MinNodes, p.MaxNodes = 3, 2 },
			[]string{"--nnodes=3:2: minimum 3 is greater than maximum 2; write --nnodes=MIN:MAX with MIN <= MAX"}},
		{"node unit zero", func(p *Policy) { p.NodeUnit = 0 }, []string{"--node-unit=0: must be at least 1"}},
		{"node unit above max", func(p *Policy) { p.NodeUnit = 5 },
			[]string{"--node-unit=5 is more than the maximum of 4 nodes (--nnodes=1:4); lower --node-unit or raise --nnodes"}},
		{"no multiple of the node unit", func(p *Policy) { p.MinNodes, p.MaxNodes, p.NodeUnit = 5, 7, 4 },
			[]string{"--node-unit=4: no multiple of 4 nodes lies within --nnodes=5:7, so no world could form; change --node-unit or --nnodes"}},
		{"negative restarts", func(p *Policy) { p.MaxRestarts = -1 }, []string{"--max-restarts=-1: must be 0 to 1048576"}},
		{"every timeout wrong", func(p *Policy) {
			p.JoinTimeout, p.LastCallTimeout, p.HeartbeatTimeout, p.DisconnectGrace = 0, -time.Second, time.Nanosecond, -time.Second
		}, []string{
			"--join-timeout=0s: must be positive",
			"--last-call-timeout=-1s: must be positive",
			"--heartbeat-timeout=1ns: must be at least 1ms: the master keeps whole milliseconds",
			"--disconnect-grace=-1s: must not be negative",
		}},
		{"grace below the millisecond", func(p *Policy) { p.DisconnectGrace = time.Microsecond },
			[]string{"--disconnect-grace=1µs: must be 0 or at least 1ms: the master keeps whole milliseconds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := valid
			if tt.mod != nil {
				tt.mod(&p)
			}
			var got []string
			for _, err := range p.Check(FlagRef) {
				got = append(got, err.Error())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPolicyMessagesMatchRun: `rover run` names the same problems with its
// own flags and --rdzv-conf keys.
func TestPolicyMessagesMatchRun(t *testing.T) {
	_, err := Parse([]string{"--nnodes=2", "--rdzv-endpoint=m", "--node-unit=0",
		"--rdzv-conf=heartbeat_timeout=1ns", "--no-python", "true"}, nil)
	if err == nil {
		t.Fatal("Parse accepted --node-unit=0 and heartbeat_timeout=1ns")
	}
	for _, want := range []string{"--node-unit=0: must be at least 1",
		"--rdzv-conf heartbeat_timeout=1ns: must be at least 1ms: the master keeps whole milliseconds"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse error lacks %q:\n%v", want, err)
		}
	}
}

func TestValueError(t *testing.T) {
	_, _, err := ParseNNodes("2x")
	got := ValueError("nnodes", "2x", err).Error()
	if want := "--nnodes=2x: want N or MIN:MAX, e.g. 2 or 1:4"; got != want {
		t.Errorf("ValueError = %q, want %q", got, want)
	}
}
