package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/shardbatch"
)

// Where a worker process dies: before one of its calls leaves it, while
// the call is on its way to the master (the master applies it, as it does
// a call whose caller went away), or after the master applied it and
// before the answer reached it.
const (
	dieBefore = iota
	dieInFlight
	dieAnswerLost
	diePhases
)

// doomedProcess is one worker process of the fault test.
type doomedProcess struct {
	slot, inc int64
	cancel    context.CancelFunc
	dieAt     int // its op that it dies at (-1: it lives)
	phase     int
	mu        sync.Mutex
	op        int // the op it is making
}

// faultRun is the state of one seeded run: every process, and the log all
// of them write, as leased.py writes it.
type faultRun struct {
	mu    sync.Mutex
	procs map[string]*doomedProcess // by "<slot>/<inc>"
	log   []string                  // "pending <proc> <epoch> <indices>", "done ...", "refused <proc>"
}

func procKey(worker string, inc int64) string {
	_, local, _ := strings.Cut(worker, "/")
	return local + "/" + strconv.FormatInt(inc, 10)
}

// hook kills the process whose op passes through a batch, when it is doomed
// to die there.
func (f *faultRun) hook(ops []*roverv1.ShardOp, applied bool) {
	for _, op := range ops {
		w, inc := op.GetLease().GetWorker(), op.GetLease().GetIncarnation()
		if c := op.GetComplete(); c != nil {
			w, inc = c.GetWorker(), c.GetIncarnation()
		}
		f.mu.Lock()
		p := f.procs[procKey(w, inc)]
		f.mu.Unlock()
		if p == nil {
			continue
		}
		p.mu.Lock()
		if p.op == p.dieAt && (p.phase == dieInFlight && !applied || p.phase == dieAnswerLost && applied) {
			p.cancel()
		}
		p.mu.Unlock()
	}
}

func (f *faultRun) write(line string) {
	f.mu.Lock()
	f.log = append(f.log, line)
	f.mu.Unlock()
}

// TestRandomWorkerDeaths: four workers lease (two shards ahead, as
// ShardClient does), work and complete through a real agent's batcher
// (two batches in flight, as the agent runs it) and a real master, and
// processes die at random ops and phases, each followed at once by the
// next process of its worker (a newer incarnation, racing with whatever
// its predecessor still had on its way). Every run must finish its epochs
// with every sample in exactly one completed shard of the log, or in the
// shard a dead process was completing; none twice.
func TestRandomWorkerDeaths(t *testing.T) {
	const workers, size, epochs, seeds, deaths = 4, 300, 2, 12, 3
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			f := &faultRun{procs: map[string]*doomedProcess{}}
			r := newDeadWorkerRigOpts(t, workers, size, epochs,
				shardbatch.Options{MaxOps: master.MaxBatchOps, InFlight: 2}, f.hook)
			r.l.current.Store(&placement{Round: 1 << 20, NodeID: "n", LocalWorldSize: workers})
			var wg sync.WaitGroup
			var died atomic.Int64
			for slot := range int64(workers) {
				plan := make([][2]int, deaths) // (op, phase) of each doomed process
				for i := range plan {
					plan[i] = [2]int{rng.IntN(12), rng.IntN(diePhases)}
				}
				client := uint64(rng.Uint32()) << 32
				wg.Go(func() {
					for inc := int64(1); ; inc++ {
						p := &doomedProcess{slot: slot, inc: inc, dieAt: -1}
						if int(inc) <= len(plan) {
							p.dieAt, p.phase = plan[inc-1][0], plan[inc-1][1]
						}
						if f.runProcess(t, r, p, client+uint64(inc)<<40) {
							return
						}
						died.Add(1)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			checkFaultLog(t, f.log, epochs, size)
			t.Logf("%d processes died", died.Load())
		})
	}
}

// runProcess runs one worker process until the dataset ends (true) or it
// dies (false).
func (f *faultRun) runProcess(t *testing.T, r *deadWorkerRig, p *doomedProcess, client uint64) bool {
	if r.ctx.Err() != nil {
		t.Errorf("worker %d: the dataset did not end within the run's deadline (shards held by no live process?)", p.slot)
		return true
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	p.cancel = cancel
	name := fmt.Sprintf("%d/%d", p.slot, p.inc)
	f.mu.Lock()
	f.procs[name] = p
	f.mu.Unlock()
	w := strconv.FormatInt(p.slot, 10)
	// next starts op n; false when the process dies before sending it.
	n := -1
	next := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		n++
		p.op = n
		if n == p.dieAt && p.phase == dieBefore {
			cancel()
		}
		return ctx.Err() == nil
	}
	var ready []*roverv1.Shard
	ended := false
	seq := uint64(0)
	for {
		if len(ready) < 2 && !ended {
			if !next() {
				return false
			}
			seq++
			resp, err := r.api.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: "d", Worker: w,
				Incarnation: p.inc, Max: int32(2 - len(ready)), RequestId: client | seq}))
			if ctx.Err() != nil {
				return false
			}
			if err != nil {
				t.Errorf("process %s: lease: %v", name, err)
				return true
			}
			ready = append(ready, resp.Msg.GetShards()...)
			ended = resp.Msg.GetEnd()
		}
		if len(ready) == 0 {
			if ended {
				return true
			}
			select { // others hold the epoch's last shards: poll, as ShardClient does
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return false
			}
			continue
		}
		s := ready[0]
		ready = ready[1:]
		samples := fmt.Sprint(s.GetEpoch(), " ", s.GetStart(), " ", s.GetEnd())
		f.write("pending " + name + " " + samples)
		if !next() {
			return false
		}
		resp, err := r.api.CompleteShards(ctx, completeReq(w, p.inc, s.GetLeaseId()))
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			t.Errorf("process %s: complete: %v", name, err)
			return true
		}
		if slices.Contains(resp.Msg.GetUnknown(), s.GetLeaseId()) {
			f.write("refused " + name)
			t.Errorf("process %s: a live process's completion was refused", name)
			continue
		}
		f.write("done " + name + " " + samples)
	}
}

// checkFaultLog checks the log of a run: each sample in at most one done
// shard, and every sample in one, or in the shard its dead process was
// completing (its last pending line, without an outcome).
func checkFaultLog(t *testing.T, log []string, epochs, size int64) {
	t.Helper()
	type span struct{ epoch, start, end int64 }
	parse := func(fields []string) span {
		var s span
		s.epoch, _ = strconv.ParseInt(fields[0], 10, 64)
		s.start, _ = strconv.ParseInt(fields[1], 10, 64)
		s.end, _ = strconv.ParseInt(fields[2], 10, 64)
		return s
	}
	done := map[[2]int64]int{}
	open := map[string]span{} // process -> the shard it announced
	for _, line := range log {
		f := strings.Fields(line)
		switch f[0] {
		case "pending":
			open[f[1]] = parse(f[2:])
		case "done":
			delete(open, f[1])
			s := parse(f[2:])
			for i := s.start; i < s.end; i++ {
				done[[2]int64{s.epoch, i}]++
			}
		case "refused":
			delete(open, f[1])
		}
	}
	unresolved := map[[2]int64]bool{}
	for _, s := range open {
		for i := s.start; i < s.end; i++ {
			unresolved[[2]int64{s.epoch, i}] = true
		}
	}
	lost := 0
	for e := range epochs {
		for i := range size {
			switch n := done[[2]int64{e, i}]; {
			case n > 1:
				t.Errorf("epoch %d sample %d completed %d times", e, i, n)
			case n == 0 && !unresolved[[2]int64{e, i}]:
				lost++
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d samples lost: in no completed shard, nor in one a dead process was completing (%d such shards)", lost, len(open))
	}
}
