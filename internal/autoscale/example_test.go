package autoscale_test

import (
	"fmt"
	"time"

	"github.com/roverml/rover/internal/autoscale"
)

// A job on one node, measured after its warm-up, is predicted to gain from
// a second node: the policy grows it, then waits for the new round.
func ExamplePolicy() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := autoscale.New(autoscale.Config{MinNodes: 1, MaxNodes: 4, WarmupSteps: 20, WarmupTime: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	p.RoundFormed(autoscale.Round{Round: 1, Nodes: []string{"node-0"}, At: t0})
	at := t0
	for step := int64(10); step <= 400; step += 10 {
		at = at.Add(5 * time.Second) // 10 steps of 64 samples each 5 s: 128 samples/s
		p.Progress(autoscale.Progress{Round: 1, Step: step, Samples: 64, At: at})
	}
	d := p.Decide(at)
	fmt.Println(d.Action, d.From, "->", d.To, d.Reason)
	fmt.Println(d.Message)
	fmt.Println(p.Decide(at.Add(time.Second)).Reason)
	// Output:
	// grow 1 -> 2 predicted_gain
	// grow from 1 to 2 nodes: each added node is assumed (efficiency 0.70, one size measured) to add 0.70 of a node's share (128/s at 1, 217.6/s at 2); at least 0.30 needed
	// waiting_for_change
}
