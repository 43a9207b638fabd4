// Package metrics exports what a job master and a node agent know as
// Prometheus metrics (docs/metrics.md lists every one): each master and each
// agent has a private registry (never the process-wide default one, so that
// several masters share a process in tests), read by Prometheus from a
// listener of its own (Server) that serves /metrics and takes other
// handlers (the dashboard).
//
// The job's state is read when Prometheus scrapes, from a snapshot the
// master hands over (JobCollector): the master's hot paths pay nothing for
// gauges. What only the moment knows is counted or timed as it happens:
// RPC latency by procedure (RPCInterceptor), journal commits, rendezvous
// rounds, checkpoint saves and persists.
//
//	m := metrics.NewMaster(snapshot)
//	srv, err := metrics.Listen(":9400", m.Registry())
//	go srv.Serve(ctx)
//
// It does not decide what a job does, and it keeps no history: Prometheus
// does.
package metrics
