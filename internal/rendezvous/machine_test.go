package rendezvous

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		fields []string // named in the error; nil: valid
	}{
		{"valid", cfg(), nil},
		{"valid unit", Config{MinNodes: 2, MaxNodes: 5, NodeUnit: 2}, nil},
		{"min zero", Config{MinNodes: 0, MaxNodes: 1}, []string{"MinNodes"}},
		{"max below min", Config{MinNodes: 3, MaxNodes: 2}, []string{"MaxNodes"}},
		{"unit negative", Config{MinNodes: 1, MaxNodes: 1, NodeUnit: -1}, []string{"NodeUnit"}},
		{"no multiple of unit in range", Config{MinNodes: 3, MaxNodes: 3, NodeUnit: 2}, []string{"NodeUnit"}},
		{"everything at once", Config{MinNodes: -1, MaxNodes: -2, NodeUnit: -3, MaxRestarts: -1, LastCall: -1, JoinTimeout: -1},
			[]string{"MinNodes", "MaxNodes", "NodeUnit", "MaxRestarts", "LastCall", "JoinTimeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != (tt.fields != nil) {
				t.Fatalf("Validate = %v, want fields %v", err, tt.fields)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate = %v, does not wrap ErrInvalidConfig", err)
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
			if _, nerr := New(tt.cfg, t0); !errors.Is(nerr, ErrInvalidConfig) {
				t.Errorf("New = %v, want ErrInvalidConfig", nerr)
			}
		})
	}
}

func TestJoinValidation(t *testing.T) {
	ok := JoinRequest{NodeID: "a", RequestedRank: -1, LocalWorldSize: 8, Addr: "10.0.0.1"}
	tests := []struct {
		name   string
		mod    func(*JoinRequest)
		fields []string
	}{
		{"empty id", func(r *JoinRequest) { r.NodeID = "" }, []string{"NodeID"}},
		{"long id", func(r *JoinRequest) { r.NodeID = strings.Repeat("x", 254) }, []string{"NodeID"}},
		{"rank below -1", func(r *JoinRequest) { r.RequestedRank = -2 }, []string{"RequestedRank"}},
		{"rank at max", func(r *JoinRequest) { r.RequestedRank = 4 }, []string{"RequestedRank"}},
		{"lws zero", func(r *JoinRequest) { r.LocalWorldSize = 0 }, []string{"LocalWorldSize"}},
		{"lws huge", func(r *JoinRequest) { r.LocalWorldSize = 4097 }, []string{"LocalWorldSize"}},
		{"no addr", func(r *JoinRequest) { r.Addr = "" }, []string{"Addr"}},
		{"all", func(r *JoinRequest) { *r = JoinRequest{RequestedRank: -5} }, []string{"NodeID", "RequestedRank", "LocalWorldSize", "Addr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := New(cfg(), t0)
			req := ok
			tt.mod(&req)
			v := m.Version()
			_, err := m.Join(req, t0)
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Join = %v, want ErrInvalidRequest", err)
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
			if m.Version() != v || len(m.nodes) != 0 {
				t.Error("a rejected join changed the machine")
			}
		})
	}
	m, _ := New(cfg(), t0)
	req := ok
	req.NodeID = strings.Repeat("x", 253)
	req.RequestedRank = 3
	req.LocalWorldSize = 4096
	if _, err := m.Join(req, t0); err != nil {
		t.Fatalf("Join at the limits: %v", err)
	}
}

func TestWorldLayoutAndAssignment(t *testing.T) {
	m, _ := New(Config{MinNodes: 3, MaxNodes: 3}, t0)
	for _, r := range []JoinRequest{
		{NodeID: "c", RequestedRank: 2, LocalWorldSize: 2, Addr: "hc"},
		{NodeID: "a", RequestedRank: -1, LocalWorldSize: 8, Addr: "ha"},
		{NodeID: "b", RequestedRank: -1, LocalWorldSize: 4, Addr: "hb"},
	} {
		if _, err := m.Join(r, t0); err != nil {
			t.Fatal(err)
		}
	}
	want := Snapshot{
		Job: Running, Round: 1, WorldRound: 1, WorldSize: 14, MaxRestarts: 0, Joined: []string{},
		World: []Member{
			{NodeID: "a", NodeRank: 0, GroupRank: 0, LocalWorldSize: 8, RankOffset: 0, Addr: "ha"},
			{NodeID: "b", NodeRank: 1, GroupRank: 1, LocalWorldSize: 4, RankOffset: 8, Addr: "hb"},
			{NodeID: "c", NodeRank: 2, GroupRank: 2, LocalWorldSize: 2, RankOffset: 12, Addr: "hc"},
		},
		Config: Config{MinNodes: 3, MaxNodes: 3, NodeUnit: 1},
	}
	s := m.Snapshot()
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatalf("Snapshot (-want +got):\n%s", diff)
	}
	mb, round, ok := m.Assignment("b")
	if !ok || round != 1 || mb != want.World[1] {
		t.Fatalf("Assignment(b) = %+v, %d, %v", mb, round, ok)
	}
	if _, _, ok := m.Assignment("zzz"); ok {
		t.Fatal("Assignment of a stranger succeeded")
	}
	// The snapshot is a deep copy.
	s.World[0].NodeID = "mutated"
	if m.Snapshot().World[0].NodeID != "a" {
		t.Fatal("Snapshot shares its World with the machine")
	}
	// While the next round is open, the old world is only a reference.
	if _, err := m.Join(JoinRequest{NodeID: "a", RequestedRank: -1, LocalWorldSize: 8, Addr: "ha2"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := m.Assignment("b"); ok {
		t.Fatal("Assignment while the round is open")
	}
	if s := m.Snapshot(); !s.Open || s.WorldRound != 1 || s.Round != 2 || len(s.World) != 3 {
		t.Fatalf("open round 2 snapshot: %+v", s)
	}
}

func TestErrKinds(t *testing.T) {
	m, _ := New(Config{MinNodes: 2, MaxNodes: 2, JoinTimeout: time.Minute}, t0)
	if m.Err() != nil {
		t.Fatal("Err while running")
	}
	m.Tick(t0.Add(time.Minute))
	if err := m.Err(); !errors.Is(err, ErrTooFewNodes) || err.Error() != "only 0 of minimum 2 nodes joined round 1 within 1m0s" {
		t.Fatalf("Err = %v", err)
	}
	m, _ = New(Config{MinNodes: 1, MaxNodes: 1}, t0)
	m.Join(JoinRequest{NodeID: "a", RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, t0)
	m.WorkerFailed("a", 1, t0)
	if err := m.Err(); !errors.Is(err, ErrRestartsExhausted) {
		t.Fatalf("Err = %v", err)
	}
	m, _ = New(Config{MinNodes: 3, MaxNodes: 4, NodeUnit: 2, JoinTimeout: time.Minute}, t0)
	for _, id := range []string{"a", "b", "c"} {
		m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, t0)
	}
	m.Tick(t0.Add(time.Minute))
	if got, want := m.Snapshot().Reason, "3 nodes joined round 1 within 1m0s but NodeUnit 2 leaves 2, below the minimum 3"; got != want {
		t.Fatalf("Reason = %q, want %q", got, want)
	}
}

func TestJobStateString(t *testing.T) {
	got := []string{Running.String(), Succeeded.String(), Failed.String(), JobState(7).String()}
	if diff := cmp.Diff([]string{"Running", "Succeeded", "Failed", "JobState(7)"}, got); diff != "" {
		t.Fatal(diff)
	}
}

func TestVersionMovesOnEveryChange(t *testing.T) {
	m, _ := New(cfg(), t0)
	prev := m.Snapshot()
	v := m.Version()
	step := func(f func()) {
		t.Helper()
		f()
		s := m.Snapshot()
		if !cmp.Equal(prev, s) && m.Version() == v {
			t.Fatalf("snapshot changed without a version bump:\n%s", cmp.Diff(prev, s))
		}
		prev, v = s, m.Version()
	}
	j := func(id string) func() {
		return func() { m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, t0) }
	}
	step(j("a"))
	step(j("b"))
	step(func() { m.Tick(t0.Add(time.Minute)) })
	step(func() { m.NodeSucceeded("a", 1, t0.Add(time.Minute)) })
	step(func() { m.NodeSucceeded("b", 1, t0.Add(time.Minute)) })
}

// TestFreeRankHeapStaysBounded: nodes that are lost and come back to their
// ranks must not grow the free-rank heap without bound.
func TestFreeRankHeapStaysBounded(t *testing.T) {
	m, _ := New(Config{MinNodes: 1, MaxNodes: 8}, t0)
	ids := []string{"a", "b", "c", "d"}
	for i := range 1000 {
		id := ids[i%len(ids)]
		m.NodeLost(id, t0)
		if _, err := m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, t0); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, m)
	}
	if n := len(m.ranks.free); n > 2*len(m.ranks.owners)+16 {
		t.Fatalf("free heap has %d entries for %d ranks", n, len(m.ranks.owners))
	}
	if got := m.nodes["c"].rank; got != 2 {
		t.Fatalf("c has rank %d after churn, want 2", got)
	}
}
