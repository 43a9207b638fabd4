package shard

import (
	"testing"
	"time"
)

// TestFastWorkerTakesMore simulates a fast worker (1s a shard) and a slow one
// (3s a shard) over a fake clock: each asks for the next shard when it
// finishes one, so the fast one takes about three times as many, and the
// slow one does not hold the job back.
func TestFastWorkerTakesMore(t *testing.T) {
	const shards = 120
	run := func(speeds map[string]time.Duration) (map[string]int, time.Duration) {
		e := newEnv(t, leased("d", shards, 1))
		type job struct {
			l    Lease
			done time.Time
		}
		busy := map[string]*job{}
		count := map[string]int{}
		for {
			for _, w := range []string{"fast", "slow"} {
				if speeds[w] == 0 || busy[w] != nil {
					continue
				}
				if r := e.lease("d", w, 1); len(r.Shards) == 1 {
					busy[w] = &job{r.Shards[0], e.now.Add(speeds[w])}
				}
			}
			next := ""
			for w, j := range busy {
				if next == "" || j.done.Before(busy[next].done) || j.done.Equal(busy[next].done) && w < next {
					next = w
				}
			}
			if next == "" {
				break
			}
			e.now = busy[next].done
			e.complete("d", busy[next].l, next, nil)
			count[next]++
			delete(busy, next)
		}
		if s := e.status("d"); !s.Finished {
			t.Fatalf("not finished: %+v", s)
		}
		return count, e.now.Sub(t0)
	}
	both, took := run(map[string]time.Duration{"fast": time.Second, "slow": 3 * time.Second})
	_, fastOnly := run(map[string]time.Duration{"fast": time.Second})
	if both["fast"]+both["slow"] != shards || both["fast"] < 85 || both["slow"] > 35 {
		t.Fatalf("fast took %d shards, slow %d; want about 90 and 30", both["fast"], both["slow"])
	}
	// Ideal: 120 shards at 4/3 shards a second = 90s. The slow worker may
	// only hold the last shard a little longer.
	if took > 93*time.Second || took > fastOnly {
		t.Fatalf("both workers took %v, the fast one alone %v", took, fastOnly)
	}
	t.Logf("fast %d shards, slow %d, %v (fast alone %v)", both["fast"], both["slow"], took, fastOnly)
}
