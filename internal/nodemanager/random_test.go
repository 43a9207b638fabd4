package nodemanager

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/platform"
)

// randomSpec draws a small valid spec.
func randomSpec(r *rand.Rand) Spec {
	sp := Spec{Job: "job", PendingTimeout: time.Duration(r.IntN(3)) * time.Minute, PendingStrategy: PendingStrategy(r.IntN(3))}
	if r.IntN(3) == 0 {
		sp.MaxRelaunches = 1 + r.IntN(6)
	}
	for gi := range 1 + r.IntN(2) {
		g := workers(0, 1+r.IntN(4))
		g.Name = fmt.Sprintf("g%d", gi)
		g.MinNodes = r.IntN(g.MaxNodes + 1)
		g.RestartCount = r.IntN(MaxRestartCount+2) - 1
		if lo := max(g.MinNodes, 1); r.IntN(2) == 0 {
			g.Nodes = lo + r.IntN(g.MaxNodes-lo+1)
		}
		if r.IntN(3) == 0 {
			g.CriticalRanks = []int{r.IntN(g.MaxNodes)}
		}
		if r.IntN(3) == 0 {
			g.RestartCounts = map[int]int{r.IntN(g.MaxNodes): r.IntN(MaxRestartCount+2) - 1}
		}
		sp.Groups = append(sp.Groups, g)
	}
	return sp
}

// randomStep draws an input about one of ids (current, replaced or unknown).
func randomStep(r *rand.Rand, ids []string) step {
	id := ids[r.IntN(len(ids))]
	switch r.IntN(10) {
	case 8:
		return scale(fmt.Sprintf("g%d", r.IntN(2)), r.IntN(6))
	case 0:
		return pending(id)
	case 1, 2:
		return running(id, fmt.Sprintf("h%d", r.IntN(3)))
	case 3:
		return exit(id, r.IntN(3))
	case 4:
		return evicted(id)
	case 5:
		return lost(id)
	case 6:
		return act(Action{Kind: RelaunchWithMoreMemory, NodeID: id, MemoryBytes: int64(1 + r.IntN(8)), Reason: "oom"})
	case 7:
		return act(Action{Kind: MarkHostBad, Host: fmt.Sprintf("h%d", r.IntN(3))})
	}
	return tick()
}

// TestRandomInvariants feeds random inputs and checks, after every one: no
// two live nodes share a rank, relaunches stay within the budgets, every
// Create has a new id, nothing follows Fail, and a manager restored from the
// saved state answers the next input exactly like the original.
func TestRandomInvariants(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			sp := randomSpec(r)
			m := mustNew(t, sp)
			type key struct {
				group string
				rank  int
			}
			alive := map[string]key{} // created and neither deleted nor ended, per the commands and events
			created := map[string]bool{}
			ids := []string{"job-g0-0-9", "nobody"}
			relaunches, failed := 0, false
			rescaled := map[key]int{}
			now := t0
			apply := func(cmds []Command) {
				for _, c := range cmds {
					if failed {
						t.Fatalf("command %v after the job failed", c)
					}
					switch c.Kind {
					case FailJob:
						failed = true
						if m.Err() == nil || c.Reason != m.Err().Error() {
							t.Fatalf("Fail %q, Err %v", c.Reason, m.Err())
						}
					case DeleteNode:
						delete(alive, c.NodeID)
					case CreateNode:
						k := key{c.Spec.Group, c.Spec.Rank}
						for id, other := range alive {
							if other == k {
								t.Fatalf("create %s while %s of the same rank is live", c.NodeID, id)
							}
						}
						if created[c.NodeID] || c.NodeID != c.Spec.ID {
							t.Fatalf("create %s twice (spec id %s)", c.NodeID, c.Spec.ID)
						}
						created[c.NodeID], alive[c.NodeID] = true, k
						ids = append(ids, c.NodeID)
						var g GroupSpec
						for _, g = range sp.Groups {
							if g.name() == c.Spec.Group {
								break
							}
						}
						scaled := strings.HasPrefix(c.Reason, "scaled ")
						if scaled && c.Spec.Relaunch > 0 {
							rescaled[k]++
						}
						if c.Spec.Relaunch-rescaled[k] > g.budget(c.Spec.Rank) {
							t.Fatalf("create %s: relaunch %d (%d rescaled) over budget %d", c.NodeID, c.Spec.Relaunch, rescaled[k], g.budget(c.Spec.Rank))
						}
						if c.Spec.Relaunch > 0 && !scaled {
							relaunches++
						}
					}
				}
				if sp.MaxRelaunches > 0 && relaunches > sp.MaxRelaunches {
					t.Fatalf("%d relaunches over the job's %d", relaunches, sp.MaxRelaunches)
				}
			}
			apply(m.Start(now))
			for i := range 200 {
				now = now.Add(time.Duration(r.IntN(40)) * time.Second)
				s := randomStep(r, ids)
				data, err := m.MarshalState()
				if err != nil {
					t.Fatal(err)
				}
				twin, err := Restore(data)
				if err != nil {
					t.Fatalf("step %d: restore: %v\n%s", i, err, data)
				}
				cmds := s.do(m, now)
				if diff := cmp.Diff(cmds, s.do(twin, now)); diff != "" {
					t.Fatalf("step %d: restored manager differs (-orig +restored):\n%s", i, diff)
				}
				a, _ := m.MarshalState()
				b, _ := twin.MarshalState()
				if !bytes.Equal(a, b) {
					t.Fatalf("step %d: states differ:\n%s\n%s", i, a, b)
				}
				// An exit or a platform delete ends the node before the
				// manager answers it.
				if ev := s.ev; ev != nil && (ev.Kind == platform.Exited || ev.Kind == platform.Deleted) {
					delete(alive, ev.NodeID)
				}
				apply(cmds)
				for _, g := range sp.Groups {
					n := 0
					for _, k := range alive {
						if k.group == g.name() {
							n++
						}
					}
					if d := m.Desired(g.name()); n > d {
						t.Fatalf("step %d: %s has %d live nodes, more than the %d wanted", i, g.name(), n, d)
					}
				}
				if failed != (m.Err() != nil) {
					t.Fatalf("step %d: failed %v, Err %v", i, failed, m.Err())
				}
			}
			if err := m.Err(); err != nil && !errors.Is(err, ErrTooFewNodes) && !errors.Is(err, ErrCriticalNode) && !errors.Is(err, ErrPendingTimeout) {
				t.Fatalf("Err %v wraps no sentinel", err)
			}
		})
	}
}
