package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Worker states of rover_agent_workers.
const (
	WorkersRunning   = "running"
	WorkersSucceeded = "succeeded"
	WorkersFailed    = "failed"
	WorkersStopped   = "stopped"
)

var workerStates = []string{WorkersRunning, WorkersSucceeded, WorkersFailed, WorkersStopped}

// Worker is a running worker process of the agent's node.
type Worker struct {
	Local int // local rank
	Pid   int
}

// Agent is a node agent's metrics. Its methods may be called on a nil
// *Agent, which records nothing: an agent without --metrics-addr.
type Agent struct {
	reg          *prometheus.Registry
	starts       prometheus.Counter
	restarts     prometheus.Counter
	saveDur      prometheus.Histogram
	saveBytes    prometheus.Counter
	persistDur   prometheus.Histogram
	persistBytes prometheus.Counter
	pushDur      prometheus.Histogram
	pushBytes    prometheus.Counter
	pushFailures prometheus.Counter
	// ShmBytes, when set, tells the bytes of the node's checkpoint arenas.
	shmBytes func() int64
	// backupBytes, when set, tells the bytes of the backups the node
	// keeps of another node's shards.
	backupBytes func() int64

	mu sync.Mutex
	// more are the registries served with the agent's: a master it hosts.
	more    prometheus.Gatherers
	workers []Worker // the group's, while it runs
	state   string   // the group's last state; "" before the first
	n       int      // the group's workers
}

// NewAgent makes a node agent's metrics in a registry of their own;
// shmBytes, when not nil, tells the bytes of the node's shared-memory
// checkpoint arenas at each scrape.
func NewAgent(shmBytes func() int64) *Agent {
	a := &Agent{
		reg: newRegistry(true),
		starts: prometheus.NewCounter(prometheus.CounterOpts{Name: "rover_agent_worker_group_starts_total",
			Help: "Worker groups this agent started (one per round it trained in)."}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Name: "rover_agent_worker_restarts_total",
			Help: "Worker groups this agent started again, after its first: restarts after a failure or a membership change."}),
		saveDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rover_checkpoint_save_duration_seconds",
			Help:    "Time a worker took to copy a checkpoint into shared memory (from its begin to its commit call): what training waits for.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 10)}), // 1ms to 20s
		saveBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "rover_checkpoint_save_bytes_total",
			Help: "Bytes of checkpoints the workers saved into shared memory."}),
		persistDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rover_checkpoint_persist_duration_seconds",
			Help:    "Time to write one rank's checkpoint to storage in the background (write, fsync, read-back).",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10)}), // 10ms to 3min
		persistBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "rover_checkpoint_persist_bytes_total",
			Help: "Bytes of checkpoints written to storage."}),
		pushDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rover_checkpoint_backup_push_duration_seconds",
			Help:    "Time to push one local rank's sharded checkpoint to the node's backup peer in the background.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12)}), // 1ms to 3min
		pushBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "rover_checkpoint_backup_push_bytes_total",
			Help: "Bytes of sharded checkpoints pushed to the node's backup peer."}),
		pushFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "rover_checkpoint_backup_push_failures_total",
			Help: "Pushes to the node's backup peer that failed (refused, or the peer unreachable); the next save is pushed again."}),
		shmBytes: shmBytes,
	}
	a.reg.MustRegister(a.collectors()...)
	return a
}

// collectors are the agent's Rover metrics (docs/metrics.md).
func (a *Agent) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.starts, a.restarts, a.saveDur, a.saveBytes, a.persistDur, a.persistBytes,
		a.pushDur, a.pushBytes, a.pushFailures, agentCollector{a}}
}

// SetBackupBytes makes the scrapes tell the bytes of the backups the node
// keeps of another node's shards, as f says.
func (a *Agent) SetBackupBytes(f func() int64) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.backupBytes = f
}

// BackupPushed records a shard of n bytes pushed to the backup peer in d.
func (a *Agent) BackupPushed(d time.Duration, n int64) {
	if a == nil {
		return
	}
	a.pushDur.Observe(d.Seconds())
	a.pushBytes.Add(float64(n))
}

// BackupPushFailed records a push to the backup peer that failed.
func (a *Agent) BackupPushFailed() {
	if a == nil {
		return
	}
	a.pushFailures.Inc()
}

// Gatherer gathers the agent's metrics and those of the registries Add
// added since: what the agent serves (Listen).
func (a *Agent) Gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		a.mu.Lock()
		gs := append(prometheus.Gatherers{a.reg}, a.more...)
		a.mu.Unlock()
		return gs.Gather()
	})
}

// Add serves g's metrics with the agent's: those of a master the agent
// hosts. Their names must not clash with the agent's.
func (a *Agent) Add(g prometheus.Gatherer) {
	if a == nil || g == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.more = append(a.more, g)
}

// WorkersStarted records a worker group that started.
func (a *Agent) WorkersStarted(ws []Worker) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != "" {
		a.restarts.Inc()
	}
	a.starts.Inc()
	a.workers, a.state, a.n = append([]Worker(nil), ws...), WorkersRunning, len(ws)
}

// WorkersEnded records that the running group's workers ended in state
// (WorkersSucceeded, WorkersFailed or WorkersStopped).
func (a *Agent) WorkersEnded(state string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == WorkersRunning {
		a.workers, a.state = nil, state
	}
}

// Saved records a checkpoint of n bytes a worker copied into shared memory
// in d.
func (a *Agent) Saved(d time.Duration, n int64) {
	if a == nil {
		return
	}
	a.saveDur.Observe(d.Seconds())
	a.saveBytes.Add(float64(n))
}

// Persisted records a rank's checkpoint of n bytes written to storage in d.
func (a *Agent) Persisted(d time.Duration, n int64) {
	if a == nil {
		return
	}
	a.persistDur.Observe(d.Seconds())
	a.persistBytes.Add(float64(n))
}

var (
	workersDesc   = desc("rover_agent_workers", "The agent's worker processes by state: those of the running group, or else of the last group, by how it ended.", "state")
	shmDesc       = desc("rover_agent_shm_bytes", "Bytes of the node's shared-memory checkpoint arenas.")
	backupDesc    = desc("rover_agent_backup_shm_bytes", "Bytes of the shared-memory arenas holding the backup of another node's sharded checkpoints (this node is its backup peer).")
	workerRSSDesc = desc("rover_agent_worker_resident_bytes", "Resident memory of a running worker process, by local rank (the process itself, not its children).", "local_rank")
	workerCPUDesc = desc("rover_agent_worker_cpu_seconds_total", "CPU time (user and system) of a running worker process, by local rank; it starts again from 0 when the worker does.", "local_rank")
)

// agentCollector reads the workers' state and their processes' /proc at
// each scrape.
type agentCollector struct{ a *Agent }

func (agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workersDesc, shmDesc, backupDesc, workerRSSDesc, workerCPUDesc} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	ws, state, n, backup := a.workers, a.state, a.n, a.backupBytes
	a.mu.Unlock()
	for _, s := range workerStates {
		v := 0
		if s == state {
			v = n
		}
		ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(v), s)
	}
	if a.shmBytes != nil {
		ch <- prometheus.MustNewConstMetric(shmDesc, prometheus.GaugeValue, float64(a.shmBytes()))
	}
	if backup != nil {
		ch <- prometheus.MustNewConstMetric(backupDesc, prometheus.GaugeValue, float64(backup()))
	}
	for _, w := range ws {
		u, ok := readProcUsage(w.Pid)
		if !ok {
			continue // exited since
		}
		local := strconv.Itoa(w.Local)
		ch <- prometheus.MustNewConstMetric(workerRSSDesc, prometheus.GaugeValue, float64(u.rssBytes), local)
		ch <- prometheus.MustNewConstMetric(workerCPUDesc, prometheus.CounterValue, u.cpuSeconds, local)
	}
}
