package goodput_test

import (
	"fmt"
	"time"

	"github.com/roverml/rover/internal/goodput"
)

func Example() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

	m, err := goodput.New(goodput.Config{})
	if err != nil {
		panic(err)
	}
	m.Launched(at(0))
	m.RoundFormed(1, []string{"node-a"}, at(2))
	m.Progress(goodput.Progress{Round: 1, Node: "node-a", Step: 1, At: at(10)})  // startup: 10 s
	m.Progress(goodput.Progress{Round: 1, Node: "node-a", Step: 41, At: at(50)}) // 1 s a step
	m.WorkerFailed(goodput.Failure{Round: 1, Node: "node-a", Cause: "oom", DiedAt: at(50), At: at(51)})
	m.RoundFormed(2, []string{"node-a"}, at(53)) // detection 1 s, stopping 2 s
	m.Resumed(2, "node-a", 31, goodput.FromStorage, at(56))
	m.Progress(goodput.Progress{Round: 2, Node: "node-a", Step: 32, At: at(57)})
	m.Progress(goodput.Progress{Round: 2, Node: "node-a", Step: 75, At: at(100)})
	m.Ended(true, at(100))

	v := m.View(at(100))
	fmt.Printf("goodput %v of %v (%.2f)\n", v.Goodput, v.Wall, v.Ratio)
	for _, c := range v.Largest(3) {
		fmt.Printf("%s %v\n", c.Cause, c.Time)
	}
	r := v.Latest[0]
	fmt.Printf("restart: %s, resumed at %d from %s, %d steps lost, down %v\n",
		r.Reason, r.ResumedStep, r.From, r.LostSteps, r.Downtime())
	// Output:
	// goodput 1m13s of 1m40s (0.73)
	// startup 10s
	// lost_progress 10s
	// worker_start 4s
	// restart: oom, resumed at 31 from storage, 10 steps lost, down 7s
}
