// Package rover is the Go SDK for worker programs started by `rover run`: it
// talks to the node's agent over the unix socket named by ROVER_AGENT_SOCKET
// (never to the job master) to learn the worker's place in the job, to
// lease elastic data shards, and to save and restore flash checkpoints
// (Checkpointer: the same safetensors snapshots as the Python package).
//
//	c, err := rover.Connect()
//	ds, err := c.Dataset(ctx, rover.DatasetSpec{Name: "train", Size: 1_000_000, ShardSize: 512, Epochs: 1})
//	for {
//		s, err := ds.Next(ctx)
//		if errors.Is(err, io.EOF) {
//			break // the dataset is finished
//		}
//		for _, i := range s.Indices() { ... }
//		ds.Complete(ctx, s, true)
//	}
package rover
