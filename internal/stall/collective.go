package stall

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Collective is one collective operation of a rank, as its worker's
// collective timing reports it (docs/design/collective-timing.md).
type Collective struct {
	Op    string // "all_reduce", "barrier", "all_reduce (DDP bucket)", ...
	Bytes int64
	Group string // "world", or "ranks 0,2,..."
	Seq   int64  // in the group, from 1: the same on every rank
	Done  bool
}

func (c Collective) String() string {
	return fmt.Sprintf("%s #%d (group %s, %s)", c.Op, c.Seq, c.Group, byteSize(c.Bytes))
}

// RankCollective is where one rank stands: the newest collective it
// issued (Seq 0: none), and the DDP step it is in (Forwards 0: none).
type RankCollective struct {
	Rank       int32
	Node       string
	Collective Collective
	Step       DDPStep
}

// Location says where a hung job's ranks stand in their collectives.
type Location struct {
	// Waiting are the ranks in the group's newest collective, Waiting's
	// collective (In), which some rank of the group never arrived at.
	Waiting []RankCollective
	In      Collective
	// Missing are the ranks of the group that never arrived at it, with
	// the newest collective each issued.
	Missing []RankCollective
	// Others are the ranks of other groups, or of a group whose ranks all
	// stand at the same collective.
	Others []RankCollective
}

// Locate finds, from each rank's newest collective, the collective the
// ranks wait in and the ranks that never arrived at it: in a process
// group, the ranks whose newest collective is the group's highest
// sequence number still in flight wait for the ranks whose newest is
// lower. Where several groups have such a collective, the one with the
// most waiting ranks is chosen (then the first group by name). ok is false
// when no collective is in flight that a rank has not arrived at. Ranks
// that issued none are among the Others.
func Locate(ranks []RankCollective) (Location, bool) {
	byGroup := map[string][]RankCollective{}
	for _, r := range ranks {
		if r.Collective.Seq > 0 {
			byGroup[r.Collective.Group] = append(byGroup[r.Collective.Group], r)
		}
	}
	var best Location
	found := false
	for _, g := range slices.Sorted(mapKeys(byGroup)) {
		rs := byGroup[g]
		var front int64 // the newest collective in flight
		for _, r := range rs {
			if !r.Collective.Done {
				front = max(front, r.Collective.Seq)
			}
		}
		var l Location
		for _, r := range rs {
			switch {
			case front == 0:
			case r.Collective.Seq >= front:
				l.Waiting = append(l.Waiting, r)
				l.In = r.Collective
			default:
				l.Missing = append(l.Missing, r)
			}
		}
		if front == 0 || len(l.Missing) == 0 || (found && len(l.Waiting) <= len(best.Waiting)) {
			continue
		}
		best, found = l, true
	}
	if !found {
		return Location{}, false
	}
	for _, r := range ranks {
		if !slices.ContainsFunc(best.Waiting, sameRank(r)) && !slices.ContainsFunc(best.Missing, sameRank(r)) {
			best.Others = append(best.Others, r)
		}
	}
	for _, rs := range [][]RankCollective{best.Waiting, best.Missing, best.Others} {
		slices.SortFunc(rs, func(a, b RankCollective) int { return int(a.Rank - b.Rank) })
	}
	return best, true
}

func sameRank(r RankCollective) func(RankCollective) bool {
	return func(o RankCollective) bool { return o.Rank == r.Rank }
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// String is the location in a sentence: "ranks 0-2 wait in all_reduce #15
// (group world, 8.4 KiB); rank 3 (node-b) never arrived: it last completed
// all_reduce #14 (...)".
func (l Location) String() string {
	var b strings.Builder
	verb := "wait"
	if len(l.Waiting) == 1 {
		verb = "waits"
	}
	fmt.Fprintf(&b, "%s %s in %s; ", rankList(l.Waiting), verb, l.In)
	for i, r := range l.Missing {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "rank %d (%s) never arrived: it ", r.Rank, r.Node)
		if r.Collective.Done {
			fmt.Fprintf(&b, "last completed %s", r.Collective)
		} else {
			fmt.Fprintf(&b, "waits in %s", r.Collective)
		}
	}
	return b.String()
}

// rankList is "rank 3" or "ranks 0-2,5".
func rankList(rs []RankCollective) string {
	ranks := make([]int32, len(rs))
	for i, r := range rs {
		ranks[i] = r.Rank
	}
	slices.Sort(ranks)
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		s := strconv.Itoa(int(ranks[i]))
		if j > i {
			s += "-" + strconv.Itoa(int(ranks[j]))
		}
		parts = append(parts, s)
		i = j + 1
	}
	if len(ranks) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ",")
}

// byteSize is n in B, KiB, MiB or GiB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
