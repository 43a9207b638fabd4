package rendezvous

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fuzzConfig derives a config from six bytes; ok is false when it is invalid.
func fuzzConfig(b []byte) (Config, bool) {
	minN := 1 + int(b[0]%4)
	c := Config{
		MinNodes:    minN,
		MaxNodes:    minN + int(b[1]%4),
		NodeUnit:    int(b[2] % 3),
		MaxRestarts: int(b[3] % 3),
		LastCall:    time.Duration(b[4]%3) * 5 * time.Second,
		JoinTimeout: time.Duration(b[5]%3) * time.Minute,
		BlameWindow: time.Duration(b[5]/3%3) * 10 * time.Second,
	}
	return c, c.Validate() == nil
}

// play applies fuzz ops to m, checking invariants after each. Each op is
// three bytes: kind, node, argument. It returns the final machine (which a
// persistence op may have replaced).
func play(t testing.TB, m *Machine, now time.Time, ops []byte) *Machine {
	t.Helper()
	for i := 0; i+2 < len(ops); i += 3 {
		kind, id, arg := ops[i]%8, fmt.Sprintf("n%d", ops[i+1]%8), int(ops[i+2])
		prevSnap, prevVer := m.Snapshot(), m.Version()
		round := m.Snapshot().Round
		switch kind {
		case 0:
			req := JoinRequest{NodeID: id, RequestedRank: arg%(m.cfg.MaxNodes+2) - 1, LocalWorldSize: 1 + arg%3, Addr: "h" + id}
			r, err := m.Join(req, now)
			switch {
			case err == nil:
				if n := m.nodes[id]; n == nil || n.rank != r || n.lost {
					t.Fatalf("Join(%+v) = %d but node is %+v", req, r, n)
				}
				if req.RequestedRank >= 0 && r != req.RequestedRank {
					t.Fatalf("Join(%+v) = %d, requested rank not honoured", req, r)
				}
				if _, inWorld := m.index[id]; !m.nodes[id].joined && !(inWorld && !m.open) && m.job == Running {
					t.Fatalf("joined node %s neither joined nor in the world", id)
				}
			case errors.Is(err, ErrInvalidRequest), errors.Is(err, ErrRankTaken), errors.Is(err, ErrJobFinished):
			default:
				t.Fatalf("Join: unexpected error %v", err)
			}
		case 1:
			m.NodeLost(id, now)
		case 2, 3:
			r := round - arg%2
			var err error
			switch {
			case kind == 2 && arg%4 == 3:
				err = m.Regroup(id, r, now)
			case kind == 2:
				err = m.WorkerFailed(id, r, now)
			default:
				err = m.NodeSucceeded(id, r, now)
			}
			if err != nil && !errors.Is(err, ErrUnknownNode) && !errors.Is(err, ErrNotInWorld) {
				t.Fatalf("report: unexpected error %v", err)
			}
		case 4:
			now = now.Add(time.Duration(arg) * time.Second)
		case 5:
			m.Tick(now)
		case 6:
			data, err := m.MarshalState()
			if err != nil {
				t.Fatalf("MarshalState: %v", err)
			}
			r, err := Restore(data)
			if err != nil {
				t.Fatalf("Restore of MarshalState output: %v\n%s", err, data)
			}
			if diff := cmp.Diff(m.Snapshot(), r.Snapshot()); diff != "" || r.Version() != m.Version() {
				t.Fatalf("round trip changed the snapshot (-old +new):\n%s", diff)
			}
			m = r
		case 7:
			m.Expect(arg%(m.cfg.MaxNodes+2), now)
		}
		checkInvariants(t, m)
		if m.Version() < prevVer {
			t.Fatalf("version went back %d -> %d", prevVer, m.Version())
		}
		if m.Version() == prevVer && !cmp.Equal(prevSnap, m.Snapshot()) {
			t.Fatalf("op %d changed the snapshot without a version bump:\n%s", kind, cmp.Diff(prevSnap, m.Snapshot()))
		}
		if prevSnap.Job != Running && !cmp.Equal(prevSnap, m.Snapshot()) {
			t.Fatalf("op %d changed a finished job", kind)
		}
	}
	return m
}

func fuzzSeeds(f *testing.F) {
	f.Add([]byte{1, 2, 0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 2, 0, 4, 0, 20, 5, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 0, 6, 0, 0})
	f.Add([]byte{0, 3, 2, 2, 0, 2, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 1, 1, 0, 6, 0, 0, 0, 1, 0, 3, 0, 0, 3, 1, 0})
	f.Add([]byte{2, 1, 1, 0, 2, 1, 0, 0, 1, 0, 1, 2, 0, 2, 3, 4, 0, 200, 5, 0, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0})
}

// FuzzMachine feeds random event sequences to a machine: it must never panic
// and must keep its invariants.
func FuzzMachine(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 6 {
			return
		}
		c, ok := fuzzConfig(data)
		if !ok {
			return
		}
		m, err := New(c, t0)
		if err != nil {
			t.Fatal(err)
		}
		play(t, m, t0, data[6:])
	})
}

// FuzzJoinRequest checks that validation accepts exactly the valid requests
// and never panics.
func FuzzJoinRequest(f *testing.F) {
	f.Add("a", -1, 1, "h")
	f.Add("", -2, 0, "")
	f.Add(strings.Repeat("x", 254), 4, 4097, "h")
	f.Fuzz(func(t *testing.T, id string, rank, lws int, addr string) {
		m, _ := New(cfg(), t0)
		_, err := m.Join(JoinRequest{NodeID: id, RequestedRank: rank, LocalWorldSize: lws, Addr: addr}, t0)
		valid := id != "" && len(id) <= MaxNodeIDLen && rank >= -1 && rank < 4 && lws >= 1 && lws <= MaxLocalWorldSize && addr != ""
		if valid != (err == nil) {
			t.Fatalf("Join(%q, %d, %d, %q) = %v, valid = %v", id, rank, lws, addr, err, valid)
		}
		if err != nil && !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
		}
		checkInvariants(t, m)
	})
}

// FuzzRestore feeds arbitrary bytes to Restore: it must never panic, and a
// state it accepts must keep the invariants, survive another round trip and
// accept further events.
func FuzzRestore(f *testing.F) {
	for _, ops := range [][]byte{
		{0, 0, 0, 0, 1, 0, 4, 0, 30, 5, 0, 0},
		{0, 0, 0, 0, 1, 0, 0, 2, 0, 4, 0, 30, 5, 0, 0, 2, 0, 0},
		{0, 0, 0, 0, 1, 0, 4, 0, 30, 5, 0, 0, 3, 0, 0, 3, 1, 0},
		{0, 0, 0, 0, 1, 0, 0, 2, 0, 4, 0, 30, 5, 0, 0, 1, 1, 0, 0, 3, 0},
	} {
		m, _ := New(cfg(), t0)
		m = play(f, m, t0, ops)
		data, _ := m.MarshalState()
		f.Add(data)
	}
	f.Add([]byte(`{"schema":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Restore(data)
		if err != nil {
			if !errors.Is(err, ErrBadState) && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Restore error %v wraps neither ErrBadState nor ErrInvalidConfig", err)
			}
			return
		}
		checkInvariants(t, m)
		again, err := m.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		r, err := Restore(again)
		if err != nil {
			t.Fatalf("second Restore: %v", err)
		}
		if diff := cmp.Diff(m.Snapshot(), r.Snapshot()); diff != "" {
			t.Fatalf("second round trip (-first +second):\n%s", diff)
		}
		play(t, r, t0.Add(time.Hour), []byte{0, 0, 0, 0, 1, 1, 0, 9, 2, 5, 0, 0, 1, 0, 0, 2, 1, 0, 3, 2, 0, 4, 0, 255, 5, 0, 0, 6, 0, 0})
	})
}

// TestRandomSequences runs the fuzz body on a fixed set of pseudo-random
// inputs, so plain `go test` covers more than the seed corpus.
func TestRandomSequences(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 60
	if testing.Short() {
		n = 20
	}
	for i := range n {
		data := make([]byte, 6+r.IntN(1200))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		// Bias towards joins and ticks so rounds actually form.
		for j := 6; j+2 < len(data); j += 3 {
			if r.IntN(3) == 0 {
				data[j] = 0
			}
		}
		c, ok := fuzzConfig(data)
		if !ok {
			continue
		}
		m, _ := New(c, t0)
		t.Run(fmt.Sprint(i), func(t *testing.T) { play(t, m, t0, data[6:]) })
	}
}
