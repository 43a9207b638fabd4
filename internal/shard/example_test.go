package shard_test

import (
	"fmt"
	"time"

	"github.com/roverml/rover/internal/shard"
)

func Example() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := shard.New()
	err := m.Register(shard.Dataset{
		Name: "train", Size: 10, BatchSize: 2, ShardSize: 4, Epochs: 1,
		LeaseTimeout: time.Minute,
	}, now)
	if err != nil {
		panic(err)
	}
	// Workers are named by the master; the incarnation is the round their
	// process was started in.
	wa := shard.Worker{Name: "worker-a", Incarnation: 1}
	wb := shard.Worker{Name: "worker-b", Incarnation: 1}
	a, _ := m.Lease("train", shard.LeaseRequest{Worker: wa, Max: 2}, now)
	b, _ := m.Lease("train", shard.LeaseRequest{Worker: wb, Max: 2}, now)
	for _, l := range append(a.Shards, b.Shards...) {
		fmt.Printf("lease %d: samples %v\n", l.ID, l.Shard.Indices())
	}
	// worker-a dies; its shards go back to the front of the queue.
	m.WorkerLost("worker-a", now)
	r, _ := m.Lease("train", shard.LeaseRequest{Worker: wb, Max: 1}, now)
	fmt.Printf("worker-b retries [%d, %d)\n", r.Shards[0].Shard.Start, r.Shards[0].Shard.End)
	err = m.Complete("train", a.Shards[0].ID, wa, now)
	fmt.Println("late result from worker-a:", err)
	s, _ := m.Status("train")
	fmt.Printf("epoch %d: %d todo, %d doing, %d done\n", s.Epoch, s.Todo, s.Doing, s.Done)
	// Output:
	// lease 1: samples [0 1 2 3]
	// lease 2: samples [4 5 6 7]
	// lease 3: samples [8 9]
	// worker-b retries [0, 4)
	// late result from worker-a: unknown lease: dataset "train" has no lease 1 held (it expired, failed or was requeued): discard its result
	// epoch 0: 1 todo, 2 doing, 0 done
}

func ExampleRankBatch() {
	ds := shard.Dataset{Name: "train", Size: 10, BatchSize: 2, Epochs: 1, Mode: shard.Sync}
	order := shard.EpochOrder(ds, 0)
	pos := shard.Position{}
	// Two ranks for one step, then the world grows to three.
	for _, world := range []int{2, 3, 3} {
		fmt.Printf("at %+v:", pos)
		var next shard.Position
		for rank := range world {
			idx, n, ok := shard.RankBatch(ds, order, pos, world, rank, shard.PadTail)
			if !ok {
				fmt.Println(" done")
				return
			}
			fmt.Printf(" rank %d %v", rank, idx)
			next = n
		}
		fmt.Println()
		pos = next
	}
	fmt.Printf("then %+v\n", pos)
	// Output:
	// at {Epoch:0 Consumed:0}: rank 0 [0 1] rank 1 [2 3]
	// at {Epoch:0 Consumed:4}: rank 0 [4 5] rank 1 [6 7] rank 2 [8 9]
	// at {Epoch:1 Consumed:0}: done
}
