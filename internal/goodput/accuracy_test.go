package goodput

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// simStep is one computation of a step in a simulated job's own log.
type simStep struct {
	step       int64
	start, end time.Duration // since launch
	blocking   time.Duration
	first      bool // the round's first step
	lost       bool // rolled back later
}

// TestAccuracyAgainstStepLogs simulates the soak workload (2 nodes,
// steps of 107 ms with a jitter of up to 20 ms, a memory checkpoint every 2 steps blocking 6 ms, a worker
// killed every 30 s, reports at most once a second) and compares the
// machine's goodput with the one computed offline from the simulated
// workers' step log: within 2 percentage points of the wall time.
func TestAccuracyAgainstStepLogs(t *testing.T) {
	const (
		stepTime = 107 * time.Millisecond
		block    = 6 * time.Millisecond
		faultGap = 30 * time.Second
		jobSteps = 1000
	)
	rng := rand.New(rand.NewPCG(1, 22))
	m := newMachine(t)
	nodes := []string{"a", "b"}
	tm := func(d time.Duration) time.Time { return t0.Add(d) }
	var log []simStep
	now, round, step := time.Duration(0), int64(1), int64(0)
	m.Launched(tm(0))
	now += 500 * time.Millisecond
	m.RoundFormed(round, nodes, tm(now))
	now += 2500 * time.Millisecond // interpreter, imports, process group
	nextFault := faultGap
	for step < jobSteps {
		first, sentAt := true, time.Duration(-1)
		for step < jobSteps && now < nextFault {
			d, b := stepTime+time.Duration(rng.IntN(20))*time.Millisecond-10*time.Millisecond, time.Duration(0)
			if (step+1)%2 == 0 {
				b = block
			}
			if first {
				d += 400 * time.Millisecond // the first step's warm-up
			}
			if now+d+b > nextFault { // killed in the middle of the step
				now = nextFault
				break
			}
			log = append(log, simStep{step: step + 1, start: now, end: now + d + b, blocking: b, first: first})
			now += d + b
			step++
			first = false
			if b > 0 {
				for _, n := range nodes {
					m.CheckpointSaved(Save{Round: round, Node: n, Step: step, Blocking: b, At: tm(now)})
				}
			}
			if sentAt < 0 || now-sentAt >= time.Second {
				m.Progress(Progress{Round: round, Node: nodes[step%2], Step: step, At: tm(now)})
				sentAt = now
			}
		}
		if step >= jobSteps {
			break
		}
		// A worker is killed: detection, stop, rendezvous, restart.
		m.WorkerFailed(Failure{Round: round, Node: "a", Cause: "signal", DiedAt: tm(now), At: tm(now + 200*time.Millisecond)})
		now += 500 * time.Millisecond
		for _, n := range nodes {
			m.WorkersStopped(round, n, tm(now))
		}
		now += 300 * time.Millisecond
		round++
		m.RoundFormed(round, nodes, tm(now))
		now += 2 * time.Second
		resume := step / 2 * 2 // the last memory checkpoint
		for i := range log {
			if log[i].step > resume && !log[i].lost {
				log[i].lost = true
			}
		}
		step = resume
		now += 200 * time.Millisecond
		for _, n := range nodes {
			m.Resumed(round, n, resume, FromMemory, tm(now))
		}
		nextFault = now + faultGap + time.Duration(rng.IntN(2000))*time.Millisecond
	}
	m.RoundStopped(round, StopSuccess, tm(now))
	m.Ended(true, tm(now+100*time.Millisecond))

	var offline time.Duration
	for _, s := range log {
		if !s.lost && !s.first {
			offline += s.end - s.start - s.blocking
		}
	}
	v := m.View(tm(now))
	got, want := v.Ratio, float64(offline)/float64(v.Wall)
	t.Logf("goodput %.6f (%v), offline %.6f (%v), over %v with %d restarts; badput %v", got, v.Goodput, want, offline, v.Wall, v.Restarts, v.Largest(5))
	if v.Restarts < 3 || math.Abs(got-want) > 0.02 {
		t.Errorf("goodput %.4f, offline from the step log %.4f (%d restarts): more than 2 points apart", got, want, v.Restarts)
	}
}
