package stall

import (
	"fmt"
	"slices"
	"strings"
)

// DDPStep is where a rank stands in the steps of its DDP model, as its
// worker's collective timing reports it: the number of forward calls the
// model made, which is the step the rank is in (past its forward call, and
// not yet at the next). Where DDP's gradient buckets are not timed (stock
// DDP with steps too short for the timing hook to cost under 1% of one:
// docs/design/collective-timing.md), it is the only thing that tells where
// a rank stands in its gradient all-reduces.
type DDPStep struct {
	Group        string // the model's process group: "world", or "ranks 0,2,..."
	Forwards     int64  // from 1; 0: none reported
	BucketsTimed bool
}

func (s DDPStep) String() string {
	return fmt.Sprintf("DDP step #%d (group %s)", s.Forwards, s.Group)
}

// StepLocation says which ranks of a hung job never began the DDP step
// the others are in.
type StepLocation struct {
	// Ahead are the ranks in the group's newest step, In.
	Ahead []RankCollective
	In    DDPStep
	// Behind are the ranks of the group in an earlier step.
	Behind []RankCollective
}

// LocateStep finds, from each rank's DDP step, the ranks that never began
// the step the others are in: in a process group, the ranks at the most
// forward calls are in that step, and DDP's gradient all-reduce of its
// backward pass cannot complete without the ranks at fewer. Where several
// groups have such ranks, the one with the most ranks ahead is chosen (then
// the first group by name). ok is false when the ranks of every group are
// in the same step (or none reported one).
func LocateStep(ranks []RankCollective) (StepLocation, bool) {
	byGroup := map[string][]RankCollective{}
	for _, r := range ranks {
		if r.Step.Forwards > 0 {
			byGroup[r.Step.Group] = append(byGroup[r.Step.Group], r)
		}
	}
	var best StepLocation
	found := false
	for _, g := range slices.Sorted(mapKeys(byGroup)) {
		rs := byGroup[g]
		var front int64
		for _, r := range rs {
			front = max(front, r.Step.Forwards)
		}
		var l StepLocation
		for _, r := range rs {
			if r.Step.Forwards == front {
				l.Ahead = append(l.Ahead, r)
				l.In = r.Step
			} else {
				l.Behind = append(l.Behind, r)
			}
		}
		if len(l.Behind) == 0 || (found && len(l.Ahead) <= len(best.Ahead)) {
			continue
		}
		best, found = l, true
	}
	if !found {
		return StepLocation{}, false
	}
	best.In.BucketsTimed = !slices.ContainsFunc(best.Ahead, func(r RankCollective) bool { return !r.Step.BucketsTimed })
	for _, rs := range [][]RankCollective{best.Ahead, best.Behind} {
		slices.SortFunc(rs, func(a, b RankCollective) int { return int(a.Rank - b.Rank) })
	}
	return best, true
}

// String is the location in a sentence: "ranks 0-2 are in DDP step #15
// (group world), whose gradient buckets are not timed; rank 3 (node1)
// never began it: it is in DDP step #14".
func (l StepLocation) String() string {
	var b strings.Builder
	verb := "are"
	if len(l.Ahead) == 1 {
		verb = "is"
	}
	fmt.Fprintf(&b, "%s %s in %s", rankList(l.Ahead), verb, l.In)
	if !l.In.BucketsTimed {
		b.WriteString(", whose gradient buckets are not timed")
	}
	for _, r := range l.Behind {
		fmt.Fprintf(&b, "; rank %d (%s) never began it: it is in DDP step #%d", r.Rank, r.Node, r.Step.Forwards)
	}
	return b.String()
}

// Unlocated says where the ranks stand when neither Locate nor LocateStep
// finds ranks that wait for others: the newest collective, and where DDP's
// gradient buckets are not timed, the DDP step the ranks are in (a hang
// in its gradient all-reduce is not seen by the timing). "" for no ranks.
func Unlocated(ranks []RankCollective) string {
	var newest *Collective
	var untimed []DDPStep
	for _, r := range ranks {
		c := r.Collective
		if c.Seq > 0 && (newest == nil || (c.Group == newest.Group && c.Seq > newest.Seq)) {
			newest = &c
		}
		if s := r.Step; s.Forwards > 0 && !s.BucketsTimed && !slices.Contains(untimed, s) {
			untimed = append(untimed, s)
		}
	}
	var b strings.Builder
	switch {
	case newest == nil && len(untimed) == 0:
		return ""
	case newest == nil:
		b.WriteString("no rank issued a timed collective")
	case len(untimed) == 0:
		fmt.Fprintf(&b, "no rank waits for another (newest %s, done %v): the ranks are outside collectives", *newest, newest.Done)
		return b.String()
	default:
		fmt.Fprintf(&b, "no rank waits for another in a timed collective (newest %s, done %v)", *newest, newest.Done)
	}
	slices.SortFunc(untimed, func(a, b DDPStep) int { return strings.Compare(a.String(), b.String()) })
	var steps []string
	for _, s := range untimed {
		steps = append(steps, s.String())
	}
	fmt.Fprintf(&b, "; the ranks are in %s, whose gradient buckets are not timed: they may wait in its gradient all-reduce", strings.Join(steps, ", "))
	return b.String()
}
