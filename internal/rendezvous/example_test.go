package rendezvous_test

import (
	"fmt"
	"time"

	"github.com/roverml/rover/internal/rendezvous"
)

func Example() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := rendezvous.New(rendezvous.Config{
		MinNodes: 2, MaxNodes: 4, MaxRestarts: 3,
		LastCall: 30 * time.Second, JoinTimeout: 10 * time.Minute,
	}, now)
	if err != nil {
		panic(err)
	}
	for _, host := range []string{"host-a", "host-b"} {
		rank, _ := m.Join(rendezvous.JoinRequest{NodeID: host, RequestedRank: -1, LocalWorldSize: 8, Addr: host}, now)
		fmt.Println(host, "has node rank", rank)
	}
	next, _ := m.NextDeadline()
	m.Tick(next) // the driver's timer fired: last call is over
	s := m.Snapshot()
	mb, round, _ := m.Assignment("host-b")
	fmt.Printf("round %d: world size %d, host-b ranks %d..%d\n", round, s.WorldSize, mb.RankOffset, mb.RankOffset+mb.LocalWorldSize-1)

	// host-a's workers crash: a failure restart.
	_ = m.WorkerFailed("host-a", round, next)
	s = m.Snapshot()
	fmt.Printf("round %d open=%v restarts %d/%d\n", s.Round, s.Open, s.Restarts, s.MaxRestarts)
	// Output:
	// host-a has node rank 0
	// host-b has node rank 1
	// round 1: world size 16, host-b ranks 8..15
	// round 2 open=true restarts 1/3
}
