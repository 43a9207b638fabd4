// Package goodput owns the accounting of a job's goodput: the share of its
// wall time spent computing training steps that were kept, and where the
// rest (the badput) went, by cause. It is a pure state machine fed by the
// events the job master already sees (rounds formed and stopped, worker
// failures, progress, restores, checkpoint saves, node checks, hangs); it
// does no I/O, starts no goroutines and reads no clock: every event carries
// its time. It does not own where the events come from (the master), how
// the result is shown (rover status, GetJob, metrics) nor its journal (the
// caller stores [Machine.MarshalState] and gives it back to [Restore]).
//
// Time is attributed lazily: the interval from the previous event to an
// event goes to the cause in force during it, so every instant of the job's
// wall time is counted exactly once. Step time is goodput until a rollback
// takes it back as lost progress. See docs/design/goodput.md.
//
//	m, _ := goodput.New(goodput.Config{})
//	m.Launched(t0)
//	m.RoundFormed(1, []string{"node-a"}, t1)
//	m.Progress(goodput.Progress{Round: 1, Node: "node-a", Step: 1, At: t2})
//	m.Progress(goodput.Progress{Round: 1, Node: "node-a", Step: 50, At: t3})
//	m.WorkerFailed(goodput.Failure{Round: 1, Node: "node-a", Cause: "oom", At: t4})
//	// ... RoundFormed(2, ...), Resumed(2, "node-a", 40, goodput.FromMemory, t5) ...
//	v := m.View(now) // v.Ratio, v.Badput[goodput.LostProgress], v.Restarts
package goodput
