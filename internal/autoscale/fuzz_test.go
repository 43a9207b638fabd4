package autoscale

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"
)

// fuzzPlay drives a policy with ops, three bytes each (kind, two
// arguments): rounds old and new of any size, progress going backwards in
// step and time, huge steps and absurd sample counts, capacities, straggler
// verdicts with NaN and infinite slowdowns, decisions, and journal round
// trips. It checks after each op that no decision leaves MinNodes..MaxNodes
// and that a restored policy writes the same state.
func fuzzPlay(t testing.TB, data []byte) {
	if len(data) < 3 {
		return
	}
	if len(data) > 3*1024 {
		data = data[:3*1024] // a thousand ops; longer inputs only slow the fuzzer
	}
	minN := 1 + int(data[0]%4)
	cfg := Config{MinNodes: minN, MaxNodes: minN + int(data[1]%6), NodeUnit: 1 + int(data[2]%3),
		WarmupSteps: -1, WarmupTime: -1, MinSamples: 2, Window: 4, CoolDown: time.Second, StragglerFor: time.Second}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now, step, round := t0, int64(0), int64(0)
	for i := 3; i+2 < len(data); i += 3 {
		kind, a, b := data[i]%8, data[i+1], data[i+2]
		now = now.Add(time.Duration(int(a%16)-3) * time.Second) // sometimes backwards
		switch kind {
		case 0:
			r := round + 1
			if b%5 == 0 {
				r = round - int64(a%3) // an old round
			} else {
				round = r
			}
			p.RoundFormed(Round{Round: r, Nodes: nodeNames(int(b % 12)), At: now})
		case 1, 2, 3:
			step += int64(b) - 40 // sometimes backwards
			st, samples := step, int64(a)*7
			switch b % 17 {
			case 0:
				st = math.MaxInt64
			case 1:
				samples = math.MaxInt64
			case 2:
				samples = -3
			}
			p.Progress(Progress{Round: round - int64(a%7/6), Step: st, Samples: samples, At: now})
		case 4:
			p.Capacity(int(b%12) - 2)
		case 5:
			slow := []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 0.5, 1, 1.5, 3}[b%8]
			p.Straggler(StragglerReport{Node: fmt.Sprintf("node-%d", a%12), Straggler: b%9 != 0, Slowdown: slow, At: now})
		case 6:
			d := p.Decide(now)
			switch d.Action {
			case Grow, Shrink:
				if d.To < cfg.MinNodes || d.To > cfg.MaxNodes {
					t.Fatalf("op %d: decision %+v outside %d..%d", i, d, cfg.MinNodes, cfg.MaxNodes)
				}
			case Hold, Replace:
				if d.To != d.From {
					t.Fatalf("op %d: decision %+v changes the size", i, d)
				}
			default:
				t.Fatalf("op %d: decision %+v: unknown action", i, d)
			}
			if math.IsNaN(d.Gain) || math.IsInf(d.Gain, 0) || d.Message == "" {
				t.Fatalf("op %d: decision %+v: gain not a number or no message", i, d)
			}
		case 7:
			state, err := p.MarshalState()
			if err != nil {
				t.Fatalf("op %d: marshal: %v", i, err)
			}
			q, err := Restore(state)
			if err != nil {
				t.Fatalf("op %d: restore: %v\n%s", i, err, state)
			}
			again, _ := q.MarshalState()
			if !bytes.Equal(state, again) {
				t.Fatalf("op %d: restored state differs:\n%s\n%s", i, state, again)
			}
			p = q
		}
	}
}

// FuzzPolicy: no input makes the policy panic, decide outside its bounds or
// lose state in the journal. Seeds are in testdata/fuzz/FuzzPolicy.
func FuzzPolicy(f *testing.F) {
	f.Add([]byte{0, 3, 0, 0, 1, 3, 1, 10, 50, 1, 10, 50, 1, 10, 50, 6, 1, 0, 7, 0, 0, 6, 20, 0})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzPlay(t, data) })
}

// FuzzRestore: Restore never panics, and what it accepts it writes back as
// it read it.
func FuzzRestore(f *testing.F) {
	p, _ := New(Config{MinNodes: 1, MaxNodes: 4})
	good, _ := p.MarshalState()
	f.Add(good)
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := Restore(data)
		if err != nil {
			return
		}
		state, err := q.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		r, err := Restore(state)
		if err != nil {
			t.Fatalf("a written state does not restore: %v\n%s", err, state)
		}
		again, _ := r.MarshalState()
		if !bytes.Equal(state, again) {
			t.Fatalf("state changed across a round trip:\n%s\n%s", state, again)
		}
		r.Decide(t0)
	})
}
