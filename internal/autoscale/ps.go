package autoscale

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The parameter-server rule: a pure state machine, like Policy, that
// decides from the CPU the roles of a parameter-server job use
// (docs/design/parameter-server.md, "PS scaling"):
//
//   - a PS whose CPU use stays at or above Hot of its request for Window is
//     migrated to one that asks for more CPU (Migrate): what it used over
//     Target, at least twice its request, at most MaxMilliCPU;
//   - when every PS stays hot for Window while every worker uses less than
//     WorkersWaiting of its request (they wait on the PS), and the job
//     runs fewer than MaxPS, one PS is added instead (Grow, Group "ps");
//     while every PS is hot and the workers wait, but not all for a
//     whole window yet, the rule holds rather than migrate;
//   - one change at a time: the next decision waits until the change is
//     seen done (the migrated rank's new node, or the added rank, reports
//     CPU), or ChangeTimeout, and then CoolDown.
//
// The driver samples each node's CPU (the local platform reads /proc) and
// calls Sample; it calls Decide on its tick and carries out what is
// decided. The rule's measurements are not journaled: a restarted master
// measures a fresh window.

// Action and reasons of the parameter-server rule.
const (
	// Migrate moves Decision.Node, a PS, to a new node that asks for
	// Decision.MilliCPU of CPU, at the same rank and address.
	Migrate Action = "migrate"

	ReasonPSHot    Reason = "ps_hot"     // migrate: a PS stayed hot for a window
	ReasonAllPSHot Reason = "all_ps_hot" // grow: every PS stayed hot while the workers waited on them
	ReasonPSCool   Reason = "ps_cool"    // hold: no PS stayed hot for a window
)

// PSGroup is the node group of the parameter servers.
const PSGroup = "ps"

// Defaults of PSConfig.
const (
	DefaultPSHot            = 0.9
	DefaultPSWindow         = time.Minute
	DefaultPSTarget         = 0.6
	DefaultPSWorkersWaiting = 0.5
	DefaultPSChangeTimeout  = 10 * time.Minute
	// psCPUStep rounds a migrated PS's request up, in milli-CPU.
	psCPUStep = 100
)

// PSConfig is the parameter-server rule's settings; zero fields take the
// defaults.
type PSConfig struct {
	// Hot is the share of its CPU request at or above which a PS is hot
	// (DefaultPSHot); Window how long it must stay hot (DefaultPSWindow).
	Hot    float64
	Window time.Duration
	// Target is the share of its new request a migrated PS is expected to
	// use (DefaultPSTarget).
	Target float64
	// WorkersWaiting: workers using less than this share of their CPU
	// request wait on the PS (DefaultPSWorkersWaiting).
	WorkersWaiting float64
	// MaxPS is the most PS the job may run; 0: no growth.
	MaxPS int
	// MaxMilliCPU bounds a PS's request; 0: no bound.
	MaxMilliCPU int64
	// CoolDown is the least time between a change seen done and the next
	// (0: Window). ChangeTimeout is how long a change may take to be seen
	// done (DefaultPSChangeTimeout).
	CoolDown, ChangeTimeout time.Duration
}

// Validate reports every field out of range, each wrapping ErrInvalidConfig.
func (c PSConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"ps-hot", c.Hot}, {"ps-target", c.Target}, {"ps-workers-waiting", c.WorkersWaiting}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			bad("%s is %v; give a fraction between 0 and 1 (0 for the default)", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"ps-window", c.Window}, {"ps-cool-down", c.CoolDown}, {"ps-change-timeout", c.ChangeTimeout}} {
		if f.v < 0 {
			bad("%s is %v; it must not be negative (0 for the default)", f.name, f.v)
		}
	}
	if c.MaxPS < 0 || c.MaxPS > MaxNodesLimit {
		bad("MaxPS is %d; give 0 (no growth) or up to %d", c.MaxPS, MaxNodesLimit)
	}
	if c.MaxMilliCPU < 0 {
		bad("MaxMilliCPU is %d; give 0 (no bound) or a positive milli-CPU", c.MaxMilliCPU)
	}
	return errors.Join(errs...)
}

func (c PSConfig) withDefaults() PSConfig {
	if c.Hot == 0 {
		c.Hot = DefaultPSHot
	}
	if c.Window == 0 {
		c.Window = DefaultPSWindow
	}
	if c.Target == 0 {
		c.Target = DefaultPSTarget
	}
	if c.WorkersWaiting == 0 {
		c.WorkersWaiting = DefaultPSWorkersWaiting
	}
	if c.CoolDown == 0 {
		c.CoolDown = c.Window
	}
	if c.ChangeTimeout == 0 {
		c.ChangeTimeout = DefaultPSChangeTimeout
	}
	return c
}

// CPUSample is one node's CPU use over the last interval: UsedMilliCPU
// (1000 is one core busy) of its RequestMilliCPU (0: unknown, the node is
// not judged).
type CPUSample struct {
	Node            string
	Group           string // PSGroup, "worker", ...
	Rank            int
	UsedMilliCPU    int64
	RequestMilliCPU int64
	At              time.Time
}

// psNode is what the rule knows of one node.
type psNode struct {
	group   string
	rank    int
	used    int64
	request int64
	at      time.Time // the last sample
	since   time.Time // hot (a PS) or waiting (a worker) since; zero: not
}

// PSPolicy is the parameter-server rule. It is not safe for concurrent use.
type PSPolicy struct {
	cfg   PSConfig
	nodes map[string]*psNode

	pending   bool     // the last change is not seen done yet
	last      Decision // the last change
	hasChange bool
	doneAt    time.Time // when the last change was seen done (or given up)
	changes   int64
}

// NewPS returns the rule for cfg, which Validate must accept.
func NewPS(cfg PSConfig) (*PSPolicy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &PSPolicy{cfg: cfg.withDefaults(), nodes: map[string]*psNode{}}, nil
}

// Sample records s. A node that was hot (or waiting) and is not any more
// starts its window over.
func (p *PSPolicy) Sample(s CPUSample) {
	if s.Node == "" || s.UsedMilliCPU < 0 {
		return
	}
	n := p.nodes[s.Node]
	if n == nil {
		n = &psNode{}
		p.nodes[s.Node] = n
		p.seen(s)
	}
	if !n.at.IsZero() && !s.At.After(n.at) {
		return // stale
	}
	n.group, n.rank, n.used, n.request, n.at = s.Group, s.Rank, s.UsedMilliCPU, s.RequestMilliCPU, s.At
	in := false
	if s.RequestMilliCPU > 0 {
		share := float64(s.UsedMilliCPU) / float64(s.RequestMilliCPU)
		if s.Group == PSGroup {
			in = share >= p.cfg.Hot
		} else {
			in = share < p.cfg.WorkersWaiting
		}
	}
	switch {
	case !in:
		n.since = time.Time{}
	case n.since.IsZero():
		n.since = s.At
	}
}

// seen clears the pending change once a node it made reports: the
// migrated rank's new node, or the added PS rank.
func (p *PSPolicy) seen(s CPUSample) {
	if !p.pending || s.Group != PSGroup {
		return
	}
	switch p.last.Action {
	case Migrate:
		if s.Rank == p.last.Rank && s.Node != p.last.Node {
			p.pending, p.doneAt = false, s.At
		}
	case Grow:
		if s.Rank == p.last.To-1 {
			p.pending, p.doneAt = false, s.At
		}
	}
}

// NodeGone forgets a node that ended or was replaced.
func (p *PSPolicy) NodeGone(node string) { delete(p.nodes, node) }

// Changes is how many changes the rule decided.
func (p *PSPolicy) Changes() int64 { return p.changes }

// LastChange is the last decided change (ok false before any).
func (p *PSPolicy) LastChange() (Decision, bool) { return p.last, p.hasChange }

// Decide says what to do at now. A change is recorded as pending: the
// rule decides nothing more until it is seen done.
func (p *PSPolicy) Decide(now time.Time) Decision {
	var ps, workers []*psNode
	var psIDs []string
	for _, id := range slicesSortedKeys(p.nodes) {
		n := p.nodes[id]
		switch n.group {
		case PSGroup:
			ps = append(ps, n)
			psIDs = append(psIDs, id)
		default:
			workers = append(workers, n)
		}
	}
	hold := func(r Reason, format string, a ...any) Decision {
		return Decision{Action: Hold, Group: PSGroup, From: len(ps), To: len(ps), Reason: r, Message: fmt.Sprintf(format, a...), At: now}
	}
	if p.pending {
		if now.Sub(p.last.At) < p.cfg.ChangeTimeout {
			return hold(ReasonWaitingForChange, "waiting for the last change (%s) to be seen done", p.last.Message)
		}
		p.pending, p.doneAt = false, now
	}
	if p.hasChange && now.Sub(p.doneAt) < p.cfg.CoolDown {
		return hold(ReasonCoolDown, "%v since the last change; the cool-down is %v", now.Sub(p.doneAt).Round(time.Second), p.cfg.CoolDown)
	}
	if len(ps) == 0 {
		return hold(ReasonMeasuring, "no PS has reported its CPU use yet")
	}
	hot := func(n *psNode) bool { return !n.since.IsZero() && now.Sub(n.since) >= p.cfg.Window }
	allHot, allHotNow, hottest, hottestShare := true, true, -1, 0.0
	var shares []string
	for i, n := range ps {
		share := 0.0
		if n.request > 0 {
			share = float64(n.used) / float64(n.request)
		}
		shares = append(shares, fmt.Sprintf("ps %d %.0f%% of %dm", n.rank, 100*share, n.request))
		allHotNow = allHotNow && !n.since.IsZero()
		if !hot(n) {
			allHot = false
			continue
		}
		if hottest < 0 || share > hottestShare {
			hottest, hottestShare = i, share
		}
	}
	if hottest < 0 {
		return hold(ReasonPSCool, "no PS used %.0f%% of its CPU request for %v (%s)", 100*p.cfg.Hot, p.cfg.Window, strings.Join(shares, ", "))
	}
	waiting, waitingNow := len(workers) > 0, len(workers) > 0
	var busy []string // the workers not waiting, for the message
	for _, w := range workers {
		waiting = waiting && hot(w)
		waitingNow = waitingNow && !w.since.IsZero()
		if w.since.IsZero() {
			busy = append(busy, fmt.Sprintf("%s %d %.0f%% of %dm", w.group, w.rank, 100*float64(w.used)/float64(max(w.request, 1)), w.request))
		}
	}
	others := ""
	switch {
	case !allHot:
		others = "; not every PS is hot"
	case len(workers) == 0:
		others = "; no worker reports its CPU"
	case len(busy) > 0:
		others = "; workers busy: " + strings.Join(busy, ", ")
	case !waiting:
		others = "; the workers wait, not for a window yet"
	}
	if allHotNow && waitingNow && !(allHot && waiting) && len(ps) < p.cfg.MaxPS {
		// Every PS is hot and the workers wait, but not all for a window
		// yet: adding a PS may be the move, not a migration.
		return hold(ReasonMeasuring, "every PS is hot and the workers wait on them: measuring a whole window of each before adding a PS (%s)", strings.Join(shares, ", "))
	}
	if allHot && waiting && len(ps) < p.cfg.MaxPS {
		return p.change(Decision{Action: Grow, Group: PSGroup, From: len(ps), To: len(ps) + 1, Reason: ReasonAllPSHot, At: now,
			Message: fmt.Sprintf("every PS used %.0f%% of its CPU request or more for %v while the workers waited on them (under %.0f%% of theirs): adding PS %d (%s)",
				100*p.cfg.Hot, p.cfg.Window, 100*p.cfg.WorkersWaiting, len(ps), strings.Join(shares, ", "))})
	}
	n := ps[hottest]
	want := max(2*n.request, int64(math.Ceil(float64(n.used)/p.cfg.Target)))
	want = (want + psCPUStep - 1) / psCPUStep * psCPUStep
	if p.cfg.MaxMilliCPU > 0 {
		want = min(want, p.cfg.MaxMilliCPU)
	}
	if want <= n.request {
		return hold(ReasonAtMax, "PS %d is hot (%.0f%% of %dm) but already asks for the most CPU a PS may (%dm)", n.rank, 100*hottestShare, n.request, p.cfg.MaxMilliCPU)
	}
	return p.change(Decision{Action: Migrate, Group: PSGroup, From: len(ps), To: len(ps), Node: psIDs[hottest], Rank: n.rank,
		MilliCPU: want, Reason: ReasonPSHot, At: now,
		Message: fmt.Sprintf("PS %d used %.0f%% of its CPU request (%dm of %dm) for %v: migrating it to a PS of %dm (%s%s)",
			n.rank, 100*hottestShare, n.used, n.request, p.cfg.Window, want, strings.Join(shares, ", "), others)})
}

func (p *PSPolicy) change(d Decision) Decision {
	p.last, p.hasChange, p.pending = d, true, true
	p.changes++
	for _, n := range p.nodes {
		n.since = time.Time{} // every window starts over after a change
	}
	return d
}

func slicesSortedKeys(m map[string]*psNode) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// MilliCPUString writes a milli-CPU count as Kubernetes does ("1500m").
func MilliCPUString(m int64) string { return strconv.FormatInt(m, 10) + "m" }
