// Package bench holds Rover's benchmarks that need real processes and real
// RPC: `rover bench rendezvous` runs one real master process and many
// simulated agents (real gRPC clients on loopback, in this process) through a
// rendezvous round and a period of heartbeats, and reports figures. It owns no
// production logic.
//
//	res, err := bench.Rendezvous(ctx, bench.RendezvousConfig{Nodes: 1000, Rover: "bin/rover"}, os.Stdout)
package bench
