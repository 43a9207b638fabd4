// Package master is the job master: the single source of truth of one training
// job. It owns the wiring around the pure state machines (package rendezvous for
// rounds and ranks, package node for liveness), the job's key-value store, the
// record of failures and the journal of transitions in a Store. Its RPC handlers
// validate a request, call the core and map the core's errors to RPC codes
// through one table; each method's requests are bounded by the largest valid
// one (readlimits.go). It serves cleartext HTTP/2, or HTTP/2 over TLS with
// Config.TLS (tls.go). It never runs training code and never knows which
// platform its nodes run on.
//
//	m, err := master.New(master.Config{Listen: "127.0.0.1:0", Job: "demo", Token: tok})
//	if err != nil { ... }
//	go m.Run(ctx)          // serves until ctx ends
//	fmt.Println(m.Addr())  // where agents connect
package master
