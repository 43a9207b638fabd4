package nodecheck

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// neighbours is stage 1: node-rank neighbours in pairs; with an odd count
// the last three check together (one node checks alone).
func neighbours(nodes []string) []Group {
	var gs []Group
	for i := 0; i < len(nodes); i += 2 {
		switch {
		case len(nodes)-i == 3:
			gs = append(gs, Group{ID: len(gs), Nodes: slices.Clone(nodes[i:])})
			return gs
		case i+1 < len(nodes):
			gs = append(gs, Group{ID: len(gs), Nodes: []string{nodes[i], nodes[i+1]}})
		default:
			gs = append(gs, Group{ID: len(gs), Nodes: []string{nodes[i]}})
		}
	}
	return gs
}

// stageOutcome is what one stage said of each node.
type stageOutcome struct {
	failed map[string]bool          // in a failed group
	local  map[string]bool          // reported a failure of its own
	why    map[string]string        // the error of its own failure
	time   map[string]time.Duration // its best passed group's time
	ran    map[string]bool          // in a group of the stage
}

func (c *Check) outcome(stage int) stageOutcome {
	o := stageOutcome{failed: map[string]bool{}, local: map[string]bool{}, why: map[string]string{}, time: map[string]time.Duration{}, ran: map[string]bool{}}
	for _, g := range c.Groups[stage-1] {
		_, ok := c.groupOutcome(stage, g, true)
		t := c.groupTime(stage, g)
		for _, n := range g.Nodes {
			o.ran[n] = true
			if r, found := c.report(stage, g.ID, n); found && r.Local {
				o.local[n] = true
				o.why[n] = r.Error
			}
			if !ok {
				o.failed[n] = true
				continue
			}
			if old, seen := o.time[n]; !seen || t < old {
				o.time[n] = t
			}
		}
	}
	for n := range o.failed {
		delete(o.time, n) // a node with a failed group failed the stage
	}
	return o
}

func (m *Machine) endStage(now time.Time) {
	c := m.check
	if c.Stage == 1 {
		if groups := m.recheck(c); len(groups) > 0 {
			c.Stage = 2
			c.Groups = append(c.Groups, groups)
			c.undecided = -1
			c.Deadline = now.Add(m.stageTimeout(groups))
			return
		}
	}
	m.conclude(now)
}

// recheck is stage 2: every node that failed stage 1 (those that reported
// a failure of their own first), then every node of a slow group (slowest
// first), each paired with a node that passed stage 1 in a fast group,
// fastest first, reusing them in turn when they are fewer. With no such
// node, each checks alone. Empty when stage 1 found nothing to recheck.
func (m *Machine) recheck(c *Check) []Group {
	o := c.outcome(1)
	var failed, slow, good []string
	var times []time.Duration
	for _, g := range c.Groups[0] {
		if _, ok := c.groupOutcome(1, g, true); ok {
			times = append(times, c.groupTime(1, g))
		}
	}
	med := median(times)
	for _, n := range c.Nodes {
		switch {
		case o.failed[n]:
			failed = append(failed, n)
		case m.slow(o.time[n], med):
			slow = append(slow, n)
		default:
			good = append(good, n)
		}
	}
	slices.SortStableFunc(failed, func(a, b string) int { return boolFirst(o.local[a], o.local[b]) })
	slices.SortStableFunc(slow, func(a, b string) int { return cmp.Compare(o.time[b], o.time[a]) })
	c.Slow = slow
	slices.SortStableFunc(good, func(a, b string) int { return cmp.Compare(o.time[a], o.time[b]) })
	var gs []Group
	for i, n := range append(failed, slow...) {
		if len(good) == 0 {
			gs = append(gs, Group{ID: i, Nodes: []string{n}})
			continue
		}
		gs = append(gs, Group{ID: i, Nodes: []string{good[i%len(good)], n}})
	}
	return gs
}

func boolFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// slow reports whether t is a straggler's time against the median med.
func (m *Machine) slow(t, med time.Duration) bool {
	return med >= 0 && float64(t) > m.cfg.ratio()*float64(med) && t-med >= m.cfg.floor()
}

// median is the lower median (of an even count, the smaller middle one, so
// that one slow pair of two is measured against the fast one); 0 of none.
func median(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// conclude gives the verdicts: a node that failed both stages is faulty
// (in stage 2 it was checked with a node that passed, or alone, so the
// failure is its own); of the others, one that was in a slow group in stage
// 1 and whose best time is still above the threshold is a straggler. A
// node of a fast group is never one: its stage-2 partner may have been the
// straggler, and a noisy first measurement is not confirmed.
func (m *Machine) conclude(now time.Time) {
	c := m.check
	o1 := c.outcome(1)
	var o2 stageOutcome
	if len(c.Groups) > 1 {
		o2 = c.outcome(2)
	}
	best := map[string]time.Duration{}
	var times []time.Duration
	for _, n := range c.Nodes {
		t1, ok1 := o1.time[n]
		t2, ok2 := o2.time[n]
		switch {
		case ok1 && ok2:
			best[n] = min(t1, t2)
		case ok1:
			best[n] = t1
		case ok2:
			best[n] = t2
		default:
			continue
		}
		times = append(times, best[n])
	}
	c.Median = median(times)
	c.Verdicts = make([]Verdict, 0, len(c.Nodes))
	var stragglers []int
	for _, n := range c.Nodes {
		v := Verdict{Node: n, Kind: Passed, Time: best[n]}
		switch {
		case o1.failed[n] && o2.failed[n]:
			v.Kind, v.Excluded = Faulty, true
			v.Reason = "failed both stages of the node check" + evidence(o1, o2, n)
		case o1.failed[n] && !o2.ran[n]:
			// Not rechecked: cannot happen, but never blame without proof.
			v.Reason = "failed stage 1 only"
		case slices.Contains(c.Slow, n) && m.slow(best[n], c.Median):
			v.Kind = Straggler
			v.Reason = fmt.Sprintf("its best time %s is above %g times the median %s", best[n].Round(time.Millisecond), m.cfg.ratio(), c.Median.Round(time.Millisecond))
			stragglers = append(stragglers, len(c.Verdicts))
		case o1.failed[n]:
			v.Reason = "failed stage 1 with a faulty peer, passed stage 2"
		default:
			v.Reason = "passed"
		}
		c.Verdicts = append(c.Verdicts, v)
	}
	excluded := 0
	for _, v := range c.Verdicts {
		if v.Excluded {
			excluded++
		}
	}
	if m.cfg.ExcludeStragglers {
		slices.SortStableFunc(stragglers, func(a, b int) int { return cmp.Compare(c.Verdicts[b].Time, c.Verdicts[a].Time) })
		for _, i := range stragglers {
			if len(c.Nodes)-excluded-1 < m.cfg.MinNodes {
				c.Verdicts[i].Reason += fmt.Sprintf("; kept: excluding it would leave fewer than %d nodes", m.cfg.MinNodes)
				continue
			}
			c.Verdicts[i].Excluded = true
			c.Verdicts[i].Reason += "; excluded (--exclude-straggler)"
			excluded++
		}
	}
	for _, v := range c.Verdicts {
		if !v.Excluded {
			m.passed[v.Node] = true
		} else {
			delete(m.passed, v.Node)
			m.excluded[v.Node] = v
		}
	}
	c.Done, c.Ended = true, now
}

// maxWhy bounds the error a verdict's reason quotes.
const maxWhy = 512

func evidence(o1, o2 stageOutcome, n string) string {
	if o1.local[n] || o2.local[n] {
		// The newest reason: a check that could not run (no torch) says why.
		why := o2.why[n]
		if why == "" {
			why = o1.why[n]
		}
		if why == "" {
			return " (its own check program failed)"
		}
		if len(why) > maxWhy {
			why = why[:maxWhy] + "..."
		}
		return " (its own check program failed: " + why + ")"
	}
	return " (stage 2 paired it with a node that passed, or checked it alone)"
}
