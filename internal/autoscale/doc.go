// Package autoscale owns the decision of how many nodes a job should run on:
// a throughput record per world size ([Record]), a throughput model that
// predicts an unmeasured size from the measured ones ([Fit]), and a scaling
// policy ([Policy]) that grows the job by node_unit while an added node is
// predicted to pay, shrinks it when the last nodes measurably do not, and
// replaces a node that stays a straggler. It is a pure state machine: events
// in (rounds formed, progress, the platform's capacity, straggler reports),
// decisions out; it does no I/O, starts no goroutines and reads no clock:
// every event carries its time. It does not own where the events come from
// (the master), how a decision is carried out (the rendezvous target and the
// platform), nor its journal (the caller stores [Policy.MarshalState] and
// gives it back to [Restore]). See docs/design/autoscale.md.
//
//	p, _ := autoscale.New(autoscale.Config{MinNodes: 1, MaxNodes: 4, NodeUnit: 1})
//	p.RoundFormed(autoscale.Round{Round: 1, Nodes: []string{"node-0"}, At: t0})
//	p.Progress(autoscale.Progress{Round: 1, Step: 120, Samples: 64, At: t1})
//	d := p.Decide(t2) // d.Action == autoscale.Grow, d.To == 2, d.Reason, d.Message
package autoscale
