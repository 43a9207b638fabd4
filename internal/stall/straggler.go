package stall

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// StragglerConfig says when a node is a straggler: its median seconds per
// step over its last Window samples exceeds Factor times the median of the
// other nodes' medians, by at least MinExcess, in busy (CPU) time, and
// either in compute time where its workers time their collectives
// (wall-clock time outside collectives: the node the others wait for
// computes longest and waits least) or in wall-clock time where they do
// not (a node waiting in collectives is not slow). A node needs MinSamples samples to be
// judged or to count in the others' median, and at least two nodes must
// have them.
type StragglerConfig struct {
	Factor     float64
	Window     int
	MinSamples int
	MinExcess  time.Duration
}

// DefaultStraggler is the documented default: 1.5x the others' median over
// the last 10 samples (about 10 s of training: agents send progress at most
// once a second), judged from 3 samples on, and at least 10 ms slower.
var DefaultStraggler = StragglerConfig{Factor: 1.5, Window: 10, MinSamples: 3, MinExcess: 10 * time.Millisecond}

// Window keeps each node's recent seconds per step.
type Window struct {
	cfg   StragglerConfig
	nodes map[string]*series
}

type series struct {
	wall, busy []float64 // newest last, at most cfg.Window
	step       int64
	// Collective timing's samples, newest last, at most cfg.Window: seconds
	// per step outside collectives and in them.
	compute, wait []float64
	// GPU matmul timing's samples, newest last, at most cfg.Window:
	// floating-point operations and kernel seconds.
	flops, matmul []float64
	// Link samples, newest last, at most cfg.Window: the node's least
	// round-trip time of its busy connections to other hosts, in seconds.
	link []float64
}

// NodeTime is one node's recent step time.
type NodeTime struct {
	Node string
	Step int64
	// Wall and Busy are the medians of the window, in seconds per step.
	Wall, Busy float64
	Samples    int
	Straggler  bool
	// Compute and Wait are the medians of collective timing's samples
	// (AddWait), in seconds per step; 0 without any.
	Compute, Wait float64
	// MatmulTFLOPS is the GPU's matmul throughput over the window's
	// samples (AddMatmul), in TFLOPS; 0 without any.
	MatmulTFLOPS float64
	// LinkRTT is the median of the node's link samples (AddLink), in
	// seconds; 0 without any.
	LinkRTT float64
}

// NewWindow returns an empty window; a zero field of cfg takes
// DefaultStraggler's value.
func NewWindow(cfg StragglerConfig) *Window {
	d := DefaultStraggler
	if cfg.Factor <= 1 {
		cfg.Factor = d.Factor
	}
	if cfg.Window <= 0 {
		cfg.Window = d.Window
	}
	if cfg.MinSamples <= 0 {
		cfg.MinSamples = d.MinSamples
	}
	if cfg.MinExcess <= 0 {
		cfg.MinExcess = d.MinExcess
	}
	cfg.MinSamples = min(cfg.MinSamples, cfg.Window)
	return &Window{cfg: cfg, nodes: map[string]*series{}}
}

// Add records one sample of node: wall-clock and busy seconds per step
// (the slowest local worker's), at step.
func (w *Window) Add(node string, wall, busy float64, step int64) {
	s := w.nodes[node]
	if s == nil {
		s = &series{}
		w.nodes[node] = s
	}
	s.wall = push(s.wall, wall, w.cfg.Window)
	s.busy = push(s.busy, busy, w.cfg.Window)
	s.step = max(s.step, step)
}

// AddWait records one sample of node's collective timing, of the same
// worker as the Add of its step: seconds per step outside collectives
// (compute) and in them (wait).
func (w *Window) AddWait(node string, compute, wait float64) {
	s := w.nodes[node]
	if s == nil {
		s = &series{}
		w.nodes[node] = s
	}
	s.compute = push(s.compute, compute, w.cfg.Window)
	s.wait = push(s.wait, wait, w.cfg.Window)
}

// AddMatmul records one sample of node's GPU matmul timing: the
// floating-point operations of its workers' matrix multiplies and the
// seconds of their kernels.
func (w *Window) AddMatmul(node string, flops, seconds float64) {
	s := w.nodes[node]
	if s == nil {
		s = &series{}
		w.nodes[node] = s
	}
	s.flops = push(s.flops, flops, w.cfg.Window)
	s.matmul = push(s.matmul, seconds, w.cfg.Window)
}

// AddLink records one sample of node's link: the least smoothed
// round-trip time, in seconds, of its workers' connections to other hosts
// that carried data since its previous sample.
func (w *Window) AddLink(node string, rtt float64) {
	s := w.nodes[node]
	if s == nil {
		s = &series{}
		w.nodes[node] = s
	}
	s.link = push(s.link, rtt, w.cfg.Window)
}

// MinLinkExcess is how much longer a node's link round trip must be than
// the others' median for the node to be a straggler by its link.
const MinLinkExcess = 2 * time.Millisecond

// tflops is the series' matmul throughput: total operations over total
// kernel seconds, in TFLOPS.
func (s *series) tflops() float64 {
	var f, sec float64
	for i := range s.flops {
		f, sec = f+s.flops[i], sec+s.matmul[i]
	}
	if sec <= 0 {
		return 0
	}
	return f / sec / 1e12
}

func push(xs []float64, x float64, n int) []float64 {
	xs = append(xs, x)
	if len(xs) > n {
		xs = slices.Delete(xs, 0, len(xs)-n)
	}
	return xs
}

// Forget drops a node (it left the job).
func (w *Window) Forget(node string) { delete(w.nodes, node) }

// Reset drops every sample: a new round's workers start afresh.
func (w *Window) Reset() { clear(w.nodes) }

// Nodes returns every node's times, sorted by node, with Straggler set.
func (w *Window) Nodes() []NodeTime {
	slow, _ := w.Stragglers()
	out := make([]NodeTime, 0, len(w.nodes))
	for id, s := range w.nodes {
		out = append(out, NodeTime{Node: id, Step: s.step, Wall: Median(s.wall), Busy: Median(s.busy),
			Samples: len(s.wall), Straggler: slices.Contains(slow, id), Compute: Median(s.compute), Wait: Median(s.wait),
			MatmulTFLOPS: s.tflops(), LinkRTT: Median(s.link)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Stragglers returns the straggling nodes, sorted, and a sentence saying
// why ("" when none).
func (w *Window) Stragglers() ([]string, string) {
	type judged struct {
		id                  string
		wall, busy          float64
		timed               bool // has collective timing's samples
		compute, waitMedian float64
		linked              bool // has link samples
		link                float64
	}
	var js []judged
	for id, s := range w.nodes {
		if len(s.wall) >= w.cfg.MinSamples {
			js = append(js, judged{id, Median(s.wall), Median(s.busy),
				len(s.compute) >= w.cfg.MinSamples, Median(s.compute), Median(s.wait),
				len(s.link) >= w.cfg.MinSamples, Median(s.link)})
		}
	}
	if len(js) < 2 {
		return nil, ""
	}
	sort.Slice(js, func(i, j int) bool { return js[i].id < js[j].id })
	excess := w.cfg.MinExcess.Seconds()
	var slow, why []string
	for i, j := range js {
		var walls, busies, computes, waits, links []float64
		for k, o := range js {
			if k != i {
				walls, busies = append(walls, o.wall), append(busies, o.busy)
				if o.timed {
					computes, waits = append(computes, o.compute), append(waits, o.waitMedian)
				}
				if o.linked {
					links = append(links, o.link)
				}
			}
		}
		ow, ob, oc, ol := Median(walls), Median(busies), Median(computes), Median(links)
		switch {
		// A node with collective timing is judged by its compute time, not
		// its wall time: in a synchronous job every node's wall time per
		// step is the slowest's, and a node whose reports lag (its agent
		// shares the slow node's throttled CPU, or its samples predate the
		// slowdown) makes the waiting nodes' wall times look high.
		case !j.timed && j.wall > w.cfg.Factor*ow && j.wall-ow >= excess:
			slow = append(slow, j.id)
			why = append(why, fmt.Sprintf("%s takes %.3fs per step, %.1fx the others' median %.3fs", j.id, j.wall, j.wall/ow, ow))
		case j.busy > w.cfg.Factor*ob && j.busy-ob >= excess:
			slow = append(slow, j.id)
			why = append(why, fmt.Sprintf("%s is busy %.3fs per step, %.1fx the others' median %.3fs (its peers wait for it)", j.id, j.busy, j.busy/ob, ob))
		case j.timed && len(computes) > 0 && j.compute > w.cfg.Factor*oc && j.compute-oc >= excess:
			slow = append(slow, j.id)
			why = append(why, fmt.Sprintf("%s computes %.3fs per step between collectives, %.1fx the others' median %.3fs: "+
				"the others wait for it, %.3fs per step in their collectives against its %.3fs", j.id, j.compute, j.compute/oc, oc, Median(waits), j.waitMedian))
		// A slow link (a slow or congested network path, a rate limit)
		// costs no CPU and no compute: every node waits in the collectives
		// alike. Every connection of the node behind it has a long round
		// trip, while the others have a short one between them; with two
		// nodes there is one link and no telling whose it is.
		case j.linked && len(links) >= 2 && j.link > w.cfg.Factor*ol && j.link-ol >= MinLinkExcess.Seconds():
			slow = append(slow, j.id)
			why = append(why, fmt.Sprintf("%s's busy connections to the other nodes take %.1f ms per round trip at best, %.1fx the others' median %.1f ms: "+
				"a slow link, which the others wait for in their collectives", j.id, 1e3*j.link, j.link/ol, 1e3*ol))
		}
	}
	if len(slow) == 0 {
		return nil, ""
	}
	return slow, strings.Join(why, "; ") + fmt.Sprintf(" (over the last %d samples; threshold %.1fx)", w.cfg.Window, w.cfg.Factor)
}

// Median of xs; 0 for none. A positive infinity counts as very slow.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
