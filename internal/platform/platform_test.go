package platform

import (
	"errors"
	"strings"
	"testing"
)

func TestNodeSpecValidate(t *testing.T) {
	ok := NodeSpec{Job: "train", Group: "worker", ID: "train-worker-0-0", Argv: []string{"rover", "run"}}
	tests := []struct {
		name string
		mod  func(*NodeSpec)
		want string // substring of the error; "": valid
	}{
		{"valid", func(*NodeSpec) {}, ""},
		{"upper-case id", func(s *NodeSpec) { s.ID = "Train-0" }, "DNS label"},
		{"long id", func(s *NodeSpec) { s.ID = strings.Repeat("a", 64) }, "DNS label"},
		{"no argv", func(s *NodeSpec) { s.Argv = nil }, "Argv"},
		{"negative rank", func(s *NodeSpec) { s.Rank = -1 }, "rank -1"},
		{"negative memory", func(s *NodeSpec) { s.Resources.MemoryBytes = -1 }, "negative resources"},
		{"no group", func(s *NodeSpec) { s.Group = "" }, "group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mod(&s)
			err := s.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && (!errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want))) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestEventDescribe(t *testing.T) {
	tests := []struct {
		ev     Event
		want   string
		failed bool
	}{
		{Event{Kind: Exited, ExitCode: 137, Signal: 9, Reason: "OOMKilled", Host: "h"}, "exited with code 137 (signal 9, OOMKilled) on h", true},
		{Event{Kind: Exited, ExitCode: 1}, "exited with code 1", true},
		{Event{Kind: Exited, ExitCode: 0}, "exited with code 0", false},
		{Event{Kind: Exited, Reason: "Error"}, "exited with code 0 (Error)", false},
		{Event{Kind: Deleted, Reason: "Evicted"}, "was deleted by the platform (Evicted)", false},
		{Event{Kind: Running, Host: "h"}, "is Running on h", false},
	}
	for _, tc := range tests {
		if got := tc.ev.Describe(); got != tc.want || tc.ev.Failed() != tc.failed {
			t.Errorf("%+v: Describe %q Failed %v, want %q %v", tc.ev, got, tc.ev.Failed(), tc.want, tc.failed)
		}
	}
	if got := EventKind(9).String(); got != "EventKind(9)" {
		t.Errorf("EventKind(9) = %q", got)
	}
}
