// Package shardbatch sends the concurrent shard calls of one node's workers
// to the job master together, by group commit: a call made while no batch is
// in flight goes at once, alone; calls made while one is in flight wait and
// go together in the next BatchShards call, each answered on its own. The
// node agent puts one Batcher in front of the master; the package does not
// serve workers, validate their calls or know the shard state.
//
//	b := shardbatch.New(masterClient, shardbatch.Options{})
//	go b.Run(ctx) // owned by the agent's errgroup
//	resp, err := b.Lease(ctx, &roverv1.LeaseShardsRequest{Dataset: "train", Worker: "node-0/3", Max: 1})
package shardbatch
