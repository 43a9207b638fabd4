// Package stall owns the pure logic of a job's runtime progress: the
// per-node step times and the stragglers among them ([Window]), and the hang
// timer ([Hang]). It does no I/O and reads no clock: callers pass the time
// and the samples, so scenario tests drive it with a fake clock. It does not
// own how progress travels (the agent and the master do) nor what is done
// about a straggler or a hang (the master's policy).
//
//	w := stall.NewWindow(stall.DefaultStraggler)
//	w.Add("node-a", 0.10, 0.08, 42) // seconds per step: wall, busy
//	w.Add("node-b", 0.31, 0.29, 42)
//	slow, why := w.Stragglers() // ["node-b"], once each has MinSamples
//
//	h := stall.NewHang(5 * time.Minute)
//	h.Progress(round, true, now) // a completed step arms the timer
//	if h.Check(later) { ... }    // true once, when the job is declared hung
package stall
