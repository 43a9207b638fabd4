package dashboard

import (
	"sync"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Sample is one point of the charts: the job at one moment.
type Sample struct {
	Time  time.Time `json:"time"`
	Round int64     `json:"round"`
	// Step is the newest step any worker reached (-1 none yet).
	Step int64 `json:"step"`
	// StepRate is the steps per second since the previous sample (0 for
	// the first, and when the step went back: a restore).
	StepRate float64 `json:"stepRate"`
	// Goodput is the job's goodput ratio so far, 0..1.
	Goodput float64 `json:"goodput"`
	// Phase is where the job stands, as its goodput says (training,
	// rendezvous, ...), or its state once it has ended.
	Phase string `json:"phase"`
}

// history is a bounded ring of samples, at most one per interval.
type history struct {
	every time.Duration

	mu    sync.Mutex
	ring  []Sample // capacity cap; next is where the next sample goes once full
	next  int
	count int
}

func newHistory(n int, every time.Duration) *history {
	return &history{every: every, ring: make([]Sample, n)}
}

// add records a sample of j taken at now, unless the newest sample is
// younger than the interval. It reports whether it recorded one.
func (h *history) add(now time.Time, j *roverv1.GetJobResponse) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := sampleOf(now, j)
	if h.count > 0 {
		prev := h.ring[(h.next-1+len(h.ring))%len(h.ring)]
		dt := now.Sub(prev.Time)
		if dt < h.every {
			return false
		}
		if prev.Step >= 0 && s.Step >= prev.Step {
			s.StepRate = float64(s.Step-prev.Step) / dt.Seconds()
		}
	}
	h.ring[h.next] = s
	h.next = (h.next + 1) % len(h.ring)
	h.count = min(h.count+1, len(h.ring))
	return true
}

// since returns the samples taken after t, oldest first.
func (h *history) since(t time.Time) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Sample, 0, h.count)
	for i := range h.count {
		s := h.ring[(h.next-h.count+i+len(h.ring))%len(h.ring)]
		if s.Time.After(t) {
			out = append(out, s)
		}
	}
	return out
}

func sampleOf(now time.Time, j *roverv1.GetJobResponse) Sample {
	s := Sample{Time: now, Round: j.GetRound(), Step: -1, Goodput: j.GetGoodput().GetRatio(), Phase: j.GetGoodput().GetPhase()}
	if p := j.GetProgress(); p != nil {
		s.Step = p.GetStep()
	} else if g := j.GetGoodput(); g != nil {
		s.Step = g.GetStep()
	}
	switch j.GetJobState() {
	case roverv1.JobState_JOB_STATE_SUCCEEDED:
		s.Phase = "succeeded"
	case roverv1.JobState_JOB_STATE_FAILED:
		s.Phase = "failed"
	}
	return s
}
