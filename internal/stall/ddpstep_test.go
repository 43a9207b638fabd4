package stall

import "testing"

// TestLocateStep: where DDP's gradient buckets are not timed, the ranks
// that never began the DDP step the others are in are found from the
// forward calls each rank reports; the group with the most ranks ahead
// wins; ranks all in one step, or reporting none, locate nothing.
func TestLocateStep(t *testing.T) {
	at := func(rank int32, node, group string, forwards int64, timed bool) RankCollective {
		return RankCollective{Rank: rank, Node: node, Step: DDPStep{Group: group, Forwards: forwards, BucketsTimed: timed}}
	}
	tests := []struct {
		name  string
		ranks []RankCollective
		ok    bool
		want  string
	}{
		{"a rank in user code before its forward call", []RankCollective{
			at(0, "n0", "world", 15, false), at(1, "n0", "world", 15, false), at(2, "n1", "world", 15, false), at(3, "n1", "world", 14, false)}, true,
			"ranks 0-2 are in DDP step #15 (group world), whose gradient buckets are not timed; rank 3 (n1) never began it: it is in DDP step #14"},
		{"timed buckets on every rank ahead", []RankCollective{
			at(0, "n0", "world", 9, true), at(1, "n1", "world", 7, true), at(2, "n1", "world", 8, false)}, true,
			"rank 0 is in DDP step #9 (group world); rank 1 (n1) never began it: it is in DDP step #7; rank 2 (n1) never began it: it is in DDP step #8"},
		{"the group with the most ranks ahead", []RankCollective{
			at(0, "n0", "ranks 0,1", 5, false), at(1, "n0", "ranks 0,1", 4, false),
			at(2, "n1", "ranks 2,3,4", 8, false), at(3, "n1", "ranks 2,3,4", 8, false), at(4, "n2", "ranks 2,3,4", 2, false)}, true,
			"ranks 2-3 are in DDP step #8 (group ranks 2,3,4), whose gradient buckets are not timed; rank 4 (n2) never began it: it is in DDP step #2"},
		{"every rank in the same step", []RankCollective{at(0, "n0", "world", 15, false), at(1, "n1", "world", 15, false)}, false, ""},
		{"no steps reported", []RankCollective{{Rank: 0, Collective: Collective{Op: "barrier", Group: "world", Seq: 1}}}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, ok := LocateStep(tt.ranks)
			if ok != tt.ok {
				t.Fatalf("LocateStep ok = %v, want %v: %+v", ok, tt.ok, l)
			}
			if got := l.String(); ok && got != tt.want {
				t.Errorf("location:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestUnlocated: where no rank waits for another, the newest collective
// is named, and where DDP's buckets are not timed, the step the ranks are
// in, without claiming they are outside collectives.
func TestUnlocated(t *testing.T) {
	done := Collective{Op: "all_reduce", Bytes: 4, Group: "world", Seq: 1, Done: true}
	step := func(forwards int64, timed bool) DDPStep {
		return DDPStep{Group: "world", Forwards: forwards, BucketsTimed: timed}
	}
	tests := []struct {
		name  string
		ranks []RankCollective
		want  string
	}{
		{"nothing reported", nil, ""},
		{"timed collectives only", []RankCollective{{Rank: 0, Collective: done}, {Rank: 1, Collective: done}},
			"no rank waits for another (newest all_reduce #1 (group world, 4 B), done true): the ranks are outside collectives"},
		{"timed buckets", []RankCollective{{Rank: 0, Collective: done, Step: step(15, true)}, {Rank: 1, Collective: done, Step: step(15, true)}},
			"no rank waits for another (newest all_reduce #1 (group world, 4 B), done true): the ranks are outside collectives"},
		{"untimed buckets", []RankCollective{{Rank: 0, Collective: done, Step: step(15, false)}, {Rank: 1, Collective: done, Step: step(15, false)}},
			"no rank waits for another in a timed collective (newest all_reduce #1 (group world, 4 B), done true); the ranks are in DDP step #15 (group world), " +
				"whose gradient buckets are not timed: they may wait in its gradient all-reduce"},
		{"untimed buckets, no collective", []RankCollective{{Rank: 0, Step: step(3, false)}, {Rank: 1, Step: step(3, false)}},
			"no rank issued a timed collective; the ranks are in DDP step #3 (group world), whose gradient buckets are not timed: they may wait in its gradient all-reduce"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Unlocated(tt.ranks); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}
