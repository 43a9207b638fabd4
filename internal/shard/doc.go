// Package shard is the job master's dynamic data sharding: datasets are
// registered by name, and the master hands out their samples so that none is
// lost or trained twice when workers die or the world changes size.
//
// It is a pure state machine in the etcd-raft style: no goroutines, no I/O,
// no clock and no randomness (shuffles are seeded, specified permutations;
// see [EpochOrder]). Every event carries the caller's now; leases whose
// deadline is at or before an event's now expire before the event, and
// [Machine.NextDeadline] tells the driver when to call [Machine.Tick].
//
// # Leased mode
//
// For asynchronous workers (parameter-server training, preprocessing,
// evaluation). An epoch is cut into shards of ShardSize positions of the
// epoch's order; workers lease shards and complete, fail or renew them. A
// shard whose lease fails or expires goes back to the front of the queue
// with one more failure, and is dropped after MaxRetries; the shards of a
// lost worker go back to the front without a failure. The next epoch starts
// only when every shard of the current one is completed or dropped, so
// epochs never overlap: a worker that asks while others hold the epoch's
// last shards is told to wait. An epoch costs O(1) memory whatever its
// size, shuffled or not: a shuffled shard's samples are computed when it is
// leased, at most MaxLeaseSamples a call. A Streaming dataset is
// one pass over an append-only stream grown by [Machine.Append] and ended by
// [Machine.Seal].
//
// # Incarnations and fences
//
// A [Worker] is a name and an incarnation: the rendezvous round its process
// was started in. The leases of a worker belong to one incarnation. A
// request from an older incarnation than the newest one seen for the name,
// or from below the job's fence, is refused with ErrSuperseded (the process
// belongs to an earlier round and must stop); the first request of a newer
// incarnation returns the older one's leases to the queue. The master calls
// [Machine.Fence] with the new round whenever a round opens, since every
// worker then restarts: the leases of every earlier process go back at once,
// and nothing that process sends later can take a shard.
//
// A lease request may carry an ID (see [LeaseRequest]): the same request
// again, because its answer was lost and the caller retried or because the
// network delivered it twice, gets the leases the first one got (those still
// held), never new ones; an older ID is ErrStaleRequest. Completing is
// idempotent without an ID.
//
// # Sync mode
//
// For DDP/FSDP, where every rank takes one local batch a step. The master
// only records the job's [Position]; each rank computes its batch with
// [RankBatch], which trains every sample of an epoch exactly once across any
// sequence of world sizes (see there for the tail policies).
//
// # Persistence
//
// [Machine.MarshalState] and [Restore] save and rebuild the whole machine
// (for a master failover); [Machine.DatasetState] and
// [Machine.RestoreDataset] save one dataset's progress with a training
// checkpoint and rewind to it. State saved by a Rover whose shuffled orders
// were other permutations is refused part-way through a shuffled epoch
// ([Machine.CheckOldOrders]).
//
//	m := shard.New()
//	err := m.Register(shard.Dataset{
//		Name: "train", Size: 1_000_000, BatchSize: 64, ShardSize: 6400,
//		Epochs: 2, Shuffle: true, Seed: 7, LeaseTimeout: 5 * time.Minute,
//	}, now)
//	// A worker of round 4 asks for work (its client's 7th request):
//	w := shard.Worker{Name: "node-a/3", Incarnation: 4}
//	res, err := m.Lease("train", shard.LeaseRequest{Worker: w, Max: 1, ID: 7}, now)
//	switch {
//	case errors.Is(err, shard.ErrSuperseded): // the process must stop
//	case res.End: // the dataset is finished
//	case res.Wait: // ask again later
//	default:
//		l := res.Shards[0] // train l.Shard.Indices(), then:
//		err = m.Complete("train", l.ID, w, now)
//		// ErrUnknownLease: the lease expired and was requeued; discard the result.
//	}
//	// When round 5 opens: m.Fence(5, now).
//	// When the worker's heartbeats stop: m.WorkerLost("node-a/3", now).
//	// Whenever m.NextDeadline passes: m.Tick(now).
//
//	// Sync mode, on every rank:
//	ds := shard.Dataset{Name: "train", Size: 1_000_000, BatchSize: 64, Epochs: 2, Shuffle: true, Seed: 7, Mode: shard.Sync}
//	pos, _ := m.Position("train") // from the master
//	order := shard.EpochOrder(ds, pos.Epoch)
//	for {
//		idx, next, ok := shard.RankBatch(ds, order, pos, worldSize, rank, shard.DropTail)
//		if !ok {
//			break
//		}
//		// train idx; rank 0 reports next: m.Advance("train", next.Epoch, next.Consumed, now)
//		if next.Epoch != pos.Epoch {
//			order = shard.EpochOrder(ds, next.Epoch)
//		}
//		pos = next
//	}
package shard
