package metrics

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// Master is a job master's metrics: the job's state read at each scrape
// (JobCollector) and the latencies the master times as they happen. Its
// methods may be called on a nil *Master, which records nothing: a master
// without --metrics-addr.
type Master struct {
	reg        *prometheus.Registry
	rpc        *prometheus.HistogramVec
	commit     prometheus.Histogram
	commitRecs prometheus.Histogram
	rendezvous prometheus.Histogram
	autoScale  *prometheus.CounterVec
	rightSize  *prometheus.CounterVec
}

// NewMaster makes the metrics of a master whose job's state snapshot
// returns, in a registry of their own; with process, the registry has the
// process's go_* and process_* metrics too (not for a master embedded in an
// agent, whose registry the agent's merges).
func NewMaster(snapshot func() JobSnapshot, process bool) *Master {
	m := &Master{
		reg: newRegistry(process),
		rpc: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rover_rpc_duration_seconds",
			Help:    "Time the master took to answer a unary RPC, by procedure and status code (streams are not timed).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs to 26s
		}, []string{"procedure", "code"}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rover_journal_commit_duration_seconds",
			Help:    "Time to make a batch of the master's transitions durable in its store (append, and the snapshot it triggers).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		commitRecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rover_journal_commit_records",
			Help:    "Transitions per durable batch of the master's journal (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8), // 1 to 16,384
		}),
		rendezvous: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rover_rendezvous_duration_seconds",
			Help:    "Time from a rendezvous round opening to its world forming.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 11), // 10ms to 10min
		}),
		autoScale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rover_autoscale_decisions_total",
			Help: "Changes the auto-scaling policy decided since the master started, by action (grow, shrink, replace) and reason code.",
		}, []string{"action", "reason"}),
		rightSize: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rover_rightsize_changes_total",
			Help: "Requests of created nodes that right-sizing changed from the configured ones since the master started, by resource (memory, cpu) and direction (up, down).",
		}, []string{"resource", "direction"}),
	}
	for _, l := range [][2]string{{"memory", "up"}, {"memory", "down"}, {"cpu", "up"}} {
		m.rightSize.WithLabelValues(l[0], l[1]) // sent as 0 until seen
	}
	m.reg.MustRegister(m.collectors(snapshot)...)
	return m
}

// collectors are the master's Rover metrics (docs/metrics.md).
func (m *Master) collectors(snapshot func() JobSnapshot) []prometheus.Collector {
	return []prometheus.Collector{m.rpc, m.commit, m.commitRecs, m.rendezvous, m.autoScale, m.rightSize, JobCollector{Snapshot: snapshot}}
}

// Registry is the master's registry, to serve (Listen).
func (m *Master) Registry() *prometheus.Registry { return m.reg }

// Committed records a durable batch of n transitions that took d.
func (m *Master) Committed(d time.Duration, n int) {
	if m == nil {
		return
	}
	m.commit.Observe(d.Seconds())
	m.commitRecs.Observe(float64(n))
}

// RoundFormed records a rendezvous round that formed d after it opened.
func (m *Master) RoundFormed(d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	m.rendezvous.Observe(d.Seconds())
}

// AutoScaleDecided counts a change the auto-scaling policy decided.
func (m *Master) AutoScaleDecided(action, reason string) {
	if m == nil {
		return
	}
	m.autoScale.WithLabelValues(action, reason).Inc()
}

// RightSized counts a created node's request that right-sizing changed:
// resource "memory" or "cpu", direction "up" or "down".
func (m *Master) RightSized(resource, direction string) {
	if m == nil {
		return
	}
	m.rightSize.WithLabelValues(resource, direction).Inc()
}

// Interceptor times the master's unary RPCs by procedure and code; it adds
// nothing to streams. A nil Master's records nothing.
func (m *Master) Interceptor() connect.Interceptor { return rpcInterceptor{m: m} }

type rpcInterceptor struct{ m *Master }

func (i rpcInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	if i.m == nil {
		return next
	}
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		code := "ok"
		if err != nil {
			code = connect.CodeOf(err).String()
		}
		i.m.rpc.WithLabelValues(req.Spec().Procedure, code).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

func (rpcInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (rpcInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
