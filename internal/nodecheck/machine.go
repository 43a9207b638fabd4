package nodecheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrStale is a report for a check or stage that is over, or that does not
// name one of the reporting node's groups.
var ErrStale = errors.New("node check report is stale")

// Result is what a node measured in one group's check.
type Result struct {
	// OK: the node's part of the check succeeded.
	OK bool `json:"ok"`
	// Local: the failure was the node's own (its check program crashed or
	// could not run), not a broken collective with its peers.
	Local bool `json:"local,omitempty"`
	// Elapsed is the node's time: Compute + Collective + Link.
	Elapsed    time.Duration `json:"elapsed,omitempty"`
	Compute    time.Duration `json:"compute,omitempty"`
	Collective time.Duration `json:"collective,omitempty"`
	Link       time.Duration `json:"link,omitempty"`
	// Bandwidth is the point-to-point throughput, bytes per second.
	Bandwidth float64 `json:"bandwidth,omitempty"`
	// Latency is the point-to-point round trip.
	Latency time.Duration `json:"latency,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// Group is the nodes that check together in one stage. The first node
// leads: it hosts the group's store and point-to-point listener.
type Group struct {
	ID    int      `json:"id"`
	Nodes []string `json:"nodes"`
}

// Report is one node's result for one group.
type Report struct {
	Stage  int    `json:"stage"`
	Group  int    `json:"group"`
	Node   string `json:"node"`
	Result Result `json:"result"`
}

// Kind is a node's verdict.
type Kind string

const (
	Passed    Kind = "passed"
	Straggler Kind = "straggler"
	Faulty    Kind = "faulty"
)

// Verdict is a node's outcome of a check.
type Verdict struct {
	Node string `json:"node"`
	Kind Kind   `json:"kind"`
	// Excluded: the node leaves the job (always for a faulty node; for a
	// straggler with ExcludeStragglers while MinNodes remain).
	Excluded bool `json:"excluded,omitempty"`
	// Time is the node's best time over the stages it passed (0: none).
	Time   time.Duration `json:"time,omitempty"`
	Reason string        `json:"reason"`
}

// Check is one check of one world: its stages' groups, the reports, and
// once Done, the verdicts.
type Check struct {
	// World is the rendezvous round whose world is checked.
	World int `json:"world"`
	// Nodes are the world's nodes in node-rank order.
	Nodes []string `json:"nodes"`
	// Stage is 1 (neighbours) or 2 (the failed and the slow, each with a
	// node that passed).
	Stage  int       `json:"stage"`
	Groups [][]Group `json:"groups"` // by stage - 1
	// Slow are the nodes of stage 1's slow groups, rechecked in stage 2:
	// only they can be stragglers.
	Slow     []string  `json:"slow,omitempty"`
	Reports  []Report  `json:"reports,omitempty"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline"`
	Done     bool      `json:"done,omitempty"`
	Ended    time.Time `json:"ended,omitzero"`
	// Cancelled: the world ended (a node was lost) before the check did.
	Cancelled bool      `json:"cancelled,omitempty"`
	Verdicts  []Verdict `json:"verdicts,omitempty"`
	// Median is the median time the straggler threshold was taken from.
	Median time.Duration `json:"median,omitempty"`

	// index finds Reports by stage, group and node; undecided counts the
	// current stage's groups not decided yet (-1: not counted). Both are
	// derived, rebuilt after a restore.
	index     map[reportKey]int
	undecided int
}

type reportKey struct {
	stage, group int
	node         string
}

// Machine runs a job's node checks, one world at a time.
type Machine struct {
	cfg Config
	// passed are the nodes that passed a check: a world of them only is
	// not checked again.
	passed map[string]bool
	// excluded are the verdicts of the nodes a check excluded: they stay
	// excluded for the job's life.
	excluded map[string]Verdict
	check    *Check
}

// New returns a machine that has checked nothing.
func New(cfg Config) *Machine {
	return &Machine{cfg: cfg, passed: map[string]bool{}, excluded: map[string]Verdict{}}
}

// Config returns the machine's configuration.
func (m *Machine) Config() Config { return m.cfg }

// Start begins checking the world of round world (nodes in node-rank
// order), unless every node passed an earlier check; it reports whether a
// check started. A check still running for an earlier world is cancelled.
func (m *Machine) Start(world int, nodes []string, now time.Time) bool {
	if c := m.check; c != nil && c.World == world {
		return false
	}
	m.Cancel()
	if len(nodes) == 0 || !slices.ContainsFunc(nodes, func(n string) bool { return !m.passed[n] }) {
		return false
	}
	c := &Check{World: world, Nodes: slices.Clone(nodes), Stage: 1, Started: now, undecided: -1}
	groups := neighbours(c.Nodes)
	c.Groups = [][]Group{groups}
	c.Deadline = now.Add(m.stageTimeout(groups))
	m.check = c
	return true
}

// Cancel abandons a running check (its world ended); a finished one stays
// for the record.
func (m *Machine) Cancel() {
	if c := m.check; c != nil && !c.Done {
		c.Done, c.Cancelled = true, true
	}
}

// Running returns the world being checked, if a check runs.
func (m *Machine) Running() (world int, ok bool) {
	if c := m.check; c != nil && !c.Done {
		return c.World, true
	}
	return 0, false
}

// Tasks returns node's groups in the running check's current stage, in the
// order the node runs them, with the stage's number.
func (m *Machine) Tasks(node string) (world, stage int, groups []Group) {
	c := m.check
	if c == nil || c.Done {
		return 0, 0, nil
	}
	for _, g := range c.Groups[c.Stage-1] {
		if slices.Contains(g.Nodes, node) {
			groups = append(groups, g)
		}
	}
	return c.World, c.Stage, groups
}

// Verdict returns node's verdict: its exclusion by any check, else its
// verdict in the last check if that included it.
func (m *Machine) Verdict(node string) (Verdict, bool) {
	if v, ok := m.excluded[node]; ok {
		return v, true
	}
	c := m.check
	if c == nil || !c.Done {
		return Verdict{}, false
	}
	for _, v := range c.Verdicts {
		if v.Node == node {
			return v, true
		}
	}
	return Verdict{}, false
}

// Last returns a copy of the running or last check; nil for none.
func (m *Machine) Status() *Check { return m.Last() }

// Stage returns the running or last check's world, its stage, whether it
// is done, and whether node is one of its nodes; ok is false when no check
// ran. It copies nothing: the master calls it for every node view.
func (m *Machine) Stage(node string) (world, stage int, done, member, ok bool) {
	c := m.check
	if c == nil {
		return 0, 0, false, false, false
	}
	return c.World, c.Stage, c.Done, slices.Contains(c.Nodes, node), true
}

// Excluded returns the verdicts of every node a check excluded, by node.
func (m *Machine) Excluded() []Verdict {
	vs := make([]Verdict, 0, len(m.excluded))
	for _, v := range m.excluded {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b Verdict) int { return strings.Compare(a.Node, b.Node) })
	return vs
}

// Last returns a copy of the running or last check; nil for none.
func (m *Machine) Last() *Check {
	if m.check == nil {
		return nil
	}
	c := *m.check
	c.Nodes = slices.Clone(c.Nodes)
	c.Groups = slices.Clone(c.Groups)
	c.Slow = slices.Clone(c.Slow)
	c.Reports = slices.Clone(c.Reports)
	c.Verdicts = slices.Clone(c.Verdicts)
	c.index, c.undecided = nil, -1
	return &c
}

// NextDeadline is when the running stage ends without its missing reports.
func (m *Machine) NextDeadline() (time.Time, bool) {
	if c := m.check; c != nil && !c.Done {
		return c.Deadline, true
	}
	return time.Time{}, false
}

// Report records node's result for group of stage in the check of world,
// and advances the check once every group of the stage is decided. A
// second report for the same group changes nothing.
func (m *Machine) Report(world, stage, group int, node string, r Result, now time.Time) error {
	c := m.check
	switch {
	case c == nil || c.World != world:
		return fmt.Errorf("%w: no check of round %d's world runs", ErrStale, world)
	case c.Done || c.Stage != stage:
		return fmt.Errorf("%w: stage %d of round %d's check is over", ErrStale, stage, world)
	}
	g, ok := groupByID(c.Groups[stage-1], group)
	if !ok || !slices.Contains(g.Nodes, node) {
		return fmt.Errorf("%w: node %q is not in group %d of stage %d", ErrStale, node, group, stage)
	}
	if _, dup := c.report(stage, group, node); dup {
		return nil
	}
	c.countUndecided()
	before, _ := c.groupOutcome(stage, g, false)
	c.Reports = append(c.Reports, Report{Stage: stage, Group: group, Node: node, Result: r})
	c.index[reportKey{stage, group, node}] = len(c.Reports) - 1
	if after, _ := c.groupOutcome(stage, g, false); after && !before {
		c.undecided--
	}
	if c.undecided == 0 {
		m.endStage(now)
	}
	return nil
}

// Tick ends the running stage when its deadline has passed: a node that
// did not report failed it.
func (m *Machine) Tick(now time.Time) {
	if c := m.check; c != nil && !c.Done && !now.Before(c.Deadline) {
		m.endStage(now)
	}
}

func (m *Machine) stageTimeout(groups []Group) time.Duration {
	most := 0 // the most groups one node runs, one after the other
	count := map[string]int{}
	for _, g := range groups {
		for _, n := range g.Nodes {
			count[n]++
			most = max(most, count[n])
		}
	}
	return time.Duration(most)*m.cfg.Timeout() + stageSlack
}

// groupByID finds a group: IDs are positions.
func groupByID(gs []Group, id int) (Group, bool) {
	if id < 0 || id >= len(gs) || gs[id].ID != id {
		return Group{}, false
	}
	return gs[id], true
}

func (c *Check) report(stage, group int, node string) (Result, bool) {
	if c.index == nil {
		c.index = make(map[reportKey]int, len(c.Reports))
		for i, r := range c.Reports {
			c.index[reportKey{r.Stage, r.Group, r.Node}] = i
		}
	}
	i, ok := c.index[reportKey{stage, group, node}]
	if !ok {
		return Result{}, false
	}
	return c.Reports[i].Result, true
}

// groupOutcome says whether a group of stage is decided and whether it
// passed: it fails at its first failed report, and passes when every node
// reported success. At the deadline (final), a missing report fails it.
func (c *Check) groupOutcome(stage int, g Group, final bool) (decided, ok bool) {
	all := true
	for _, n := range g.Nodes {
		r, found := c.report(stage, g.ID, n)
		if found && !r.OK {
			return true, false
		}
		all = all && found
	}
	if all {
		return true, true
	}
	return final, false
}

// countUndecided counts the current stage's groups not decided yet, once
// per stage (and after a restore).
func (c *Check) countUndecided() {
	if c.undecided >= 0 {
		return
	}
	c.undecided = 0
	for _, g := range c.Groups[c.Stage-1] {
		if decided, _ := c.groupOutcome(c.Stage, g, false); !decided {
			c.undecided++
		}
	}
}

// groupTime is a passed group's time: its slowest node's.
func (c *Check) groupTime(stage int, g Group) time.Duration {
	var t time.Duration
	for _, n := range g.Nodes {
		r, _ := c.report(stage, g.ID, n)
		t = max(t, r.Elapsed)
	}
	return t
}
