package liveness

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// step is one event of a scenario. op is seen, conn, disc, forget or tick;
// for tick, lost is the expected result. Every step may also check a node's
// Info (info) and the next deadline (next: seconds, -1 for none, 0 unchecked).
type step struct {
	at   float64
	op   string
	id   string
	lost []Lost
	info *Info
	next float64
}

func TestTableScenarios(t *testing.T) {
	cfg := Config{HeartbeatTimeout: 10 * time.Second, DisconnectGrace: 3 * time.Second}
	hb := "no heartbeat for 10s"
	dc := "disconnected for 3s"
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"heartbeats keep a node alive", cfg, []step{
			{at: 0, op: "seen", id: "a", next: 10},
			{at: 9, op: "seen", id: "a", next: 19},
			{at: 18, op: "tick"},
			{at: 18.5, op: "seen", id: "a", next: 28.5},
			{at: 28.4, op: "tick"},
			{at: 28.5, op: "tick", lost: []Lost{{ID: "a", Reason: hb}}, next: -1,
				info: &Info{ID: "a", LastSeen: at(18.5), Lost: true, LostReason: hb}},
			{at: 40, op: "tick"}, // reported once
		}},
		{"lost node comes back", cfg, []step{
			{at: 0, op: "seen", id: "a"},
			{at: 10, op: "tick", lost: []Lost{{ID: "a", Reason: hb}}},
			{at: 12, op: "seen", id: "a", next: 22, info: &Info{ID: "a", LastSeen: at(12)}},
			{at: 22, op: "tick", lost: []Lost{{ID: "a", Reason: hb}}},
		}},
		{"several lost at once, sorted", cfg, []step{
			{at: 0, op: "seen", id: "c"},
			{at: 1, op: "seen", id: "a"},
			{at: 2, op: "seen", id: "b"},
			{at: 3, op: "seen", id: "d", next: 10},
			{at: 12.5, op: "tick", lost: []Lost{{ID: "a", Reason: hb}, {ID: "b", Reason: hb}, {ID: "c", Reason: hb}}, next: 13},
		}},
		{"disconnect grace", cfg, []step{
			{at: 0, op: "conn", id: "a", next: 10, info: &Info{ID: "a", LastSeen: at(0), Connected: 1}},
			{at: 5, op: "seen", id: "a"},
			{at: 6, op: "disc", id: "a", next: 9,
				info: &Info{ID: "a", LastSeen: at(5), DisconnectedSince: at(6)}},
			{at: 7, op: "seen", id: "a", next: 9}, // heartbeats do not cancel the grace
			{at: 8.9, op: "tick"},
			{at: 9, op: "tick", lost: []Lost{{ID: "a", Reason: dc}}, next: -1},
		}},
		{"reconnect within grace", cfg, []step{
			{at: 0, op: "conn", id: "a"},
			{at: 1, op: "disc", id: "a", next: 4},
			{at: 3, op: "conn", id: "a", next: 13},
			{at: 5, op: "tick"},
			{at: 13, op: "tick", lost: []Lost{{ID: "a", Reason: hb}}},
		}},
		{"two streams, one closes", cfg, []step{
			{at: 0, op: "conn", id: "a"},
			{at: 1, op: "conn", id: "a", next: 11},
			{at: 2, op: "disc", id: "a", next: 11, info: &Info{ID: "a", LastSeen: at(1), Connected: 1}},
			{at: 8, op: "tick"},
			{at: 9, op: "disc", id: "a", next: 11},
			{at: 11, op: "tick", lost: []Lost{{ID: "a", Reason: hb}}},
		}},
		{"heartbeat timeout earlier than grace", Config{HeartbeatTimeout: 2 * time.Second, DisconnectGrace: time.Minute}, []step{
			{at: 0, op: "conn", id: "a"},
			{at: 1, op: "disc", id: "a", next: 2},
			{at: 2, op: "tick", lost: []Lost{{ID: "a", Reason: "no heartbeat for 2s"}}},
		}},
		{"revived node forgets the old disconnect", cfg, []step{
			{at: 0, op: "conn", id: "a"},
			{at: 1, op: "disc", id: "a"},
			{at: 4, op: "tick", lost: []Lost{{ID: "a", Reason: dc}}},
			{at: 5, op: "seen", id: "a", next: 15, info: &Info{ID: "a", LastSeen: at(5)}},
			{at: 15, op: "tick", lost: []Lost{{ID: "a", Reason: hb}}},
		}},
		{"unmatched disconnect ignored", cfg, []step{
			{at: 0, op: "disc", id: "ghost", next: -1},
			{at: 0, op: "seen", id: "a"},
			{at: 1, op: "disc", id: "a", next: 10, info: &Info{ID: "a", LastSeen: at(0)}},
		}},
		{"connect revives a lost node", cfg, []step{
			{at: 0, op: "seen", id: "a"},
			{at: 10, op: "tick", lost: []Lost{{ID: "a", Reason: hb}}},
			{at: 11, op: "conn", id: "a", next: 21, info: &Info{ID: "a", LastSeen: at(11), Connected: 1}},
		}},
		{"heartbeat rule disabled", Config{DisconnectGrace: 0}, []step{
			{at: 0, op: "seen", id: "a", next: -1},
			{at: 1000, op: "tick"},
			{at: 1000, op: "conn", id: "a", next: -1},
			{at: 1001, op: "disc", id: "a", next: 1001},
			{at: 1001, op: "tick", lost: []Lost{{ID: "a", Reason: "disconnected for 0s"}}},
		}},
		{"forget", cfg, []step{
			{at: 0, op: "seen", id: "a"},
			{at: 1, op: "seen", id: "b", next: 10},
			{at: 2, op: "forget", id: "a", next: 11},
			{at: 20, op: "tick", lost: []Lost{{ID: "b", Reason: hb}}},
		}},
		{"out of order times keep the latest", cfg, []step{
			{at: 5, op: "seen", id: "a"},
			{at: 3, op: "seen", id: "a", next: 15, info: &Info{ID: "a", LastSeen: at(5)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := NewTable(tt.cfg)
			for i, s := range tt.steps {
				now := at(s.at)
				switch s.op {
				case "seen":
					tb.Seen(s.id, now)
				case "conn":
					tb.Connected(s.id, now)
				case "disc":
					tb.Disconnected(s.id, now)
				case "forget":
					tb.Forget(s.id)
				case "tick":
					if diff := cmp.Diff(s.lost, tb.Tick(now), cmpopts.IgnoreFields(Lost{}, "Since")); diff != "" {
						t.Fatalf("step %d (%s at %v): Tick (-want +got):\n%s", i, s.op, s.at, diff)
					}
				default:
					t.Fatalf("bad op %q", s.op)
				}
				if s.info != nil {
					got, ok := tb.Get(s.info.ID)
					if !ok {
						t.Fatalf("step %d: Get(%q) not found", i, s.info.ID)
					}
					if diff := cmp.Diff(*s.info, got); diff != "" {
						t.Fatalf("step %d: Get (-want +got):\n%s", i, diff)
					}
				}
				switch {
				case s.next < 0:
					if d, ok := tb.NextDeadline(); ok {
						t.Fatalf("step %d: NextDeadline = %v, want none", i, d)
					}
				case s.next > 0:
					d, ok := tb.NextDeadline()
					if !ok || !d.Equal(at(s.next)) {
						t.Fatalf("step %d: NextDeadline = %v, %v; want %v", i, d, ok, at(s.next))
					}
				}
				checkHeap(t, tb)
			}
		})
	}
}

// checkHeap verifies that the deadline queue holds exactly the live nodes
// that can expire (the queue's own order is package deadline's to test),
// and that its earliest deadline is theirs.
func checkHeap(t *testing.T, tb *Table) {
	t.Helper()
	queued := 0
	var earliest time.Time
	for _, e := range tb.nodes {
		if !e.Queued() {
			continue
		}
		if e.lost {
			t.Fatalf("lost node %q still in the deadline queue", e.id)
		}
		if queued++; queued == 1 || e.Deadline().Before(earliest) {
			earliest = e.Deadline()
		}
	}
	if n := tb.dl.Len(); n != queued {
		t.Fatalf("the deadline queue holds %d nodes, %d of the table's are queued (a forgotten node left?)", n, queued)
	}
	if next, ok := tb.dl.Next(); ok != (queued > 0) || ok && !next.Equal(earliest) {
		t.Fatalf("the deadline queue's next is %v, %v; want %v", next, ok, earliest)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{HeartbeatTimeout: time.Second}).Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	err := Config{HeartbeatTimeout: -1, DisconnectGrace: -1}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"HeartbeatTimeout", "DisconnectGrace"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	if got := NewTable(Config{HeartbeatTimeout: -5, DisconnectGrace: -5}).Config(); got != (Config{}) {
		t.Errorf("negative durations not zeroed: %+v", got)
	}
}

func TestLenAndGetUnknown(t *testing.T) {
	tb := NewTable(Config{HeartbeatTimeout: time.Second})
	for i := range 5 {
		tb.Seen(fmt.Sprint(i), t0)
	}
	tb.Seen("0", t0)
	if tb.Len() != 5 {
		t.Fatalf("Len = %d, want 5", tb.Len())
	}
	if _, ok := tb.Get("x"); ok {
		t.Fatal("Get of unknown node succeeded")
	}
}

// FuzzTable drives the table with random event sequences and checks the heap
// invariants and that every live node is reported lost exactly when due.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{1, 1, 1, 2, 2, 2, 4, 200, 4, 10})
	f.Fuzz(func(t *testing.T, data []byte) {
		tb := NewTable(Config{HeartbeatTimeout: 10 * time.Second, DisconnectGrace: 3 * time.Second})
		now := t0
		for i := 0; i+1 < len(data); i += 2 {
			id := fmt.Sprint(data[i+1] % 8)
			switch data[i] % 6 {
			case 0:
				tb.Seen(id, now)
			case 1:
				tb.Connected(id, now)
			case 2:
				tb.Disconnected(id, now)
			case 3:
				tb.Forget(id)
			case 4:
				now = now.Add(time.Duration(data[i+1]) * 100 * time.Millisecond)
			case 5:
				lost := tb.Tick(now)
				for j, l := range lost {
					if j > 0 && lost[j-1].ID >= l.ID {
						t.Fatalf("Tick not sorted/unique: %v", lost)
					}
					if inf, _ := tb.Get(l.ID); !inf.Lost || inf.LostReason != l.Reason {
						t.Fatalf("reported %v but Get says %+v", l, inf)
					}
				}
				// Nothing live may be overdue after a Tick.
				for _, e := range tb.nodes {
					if e.lost {
						continue
					}
					if now.Sub(e.lastSeen) >= 10*time.Second {
						t.Fatalf("node %s overdue (last seen %v, now %v) but live", e.id, e.lastSeen, now)
					}
					if e.disc && now.Sub(e.discSince) >= 3*time.Second {
						t.Fatalf("node %s disconnected past grace but live", e.id)
					}
				}
			}
			checkHeap(t, tb)
			for _, e := range tb.nodes {
				if e.Queued() == e.lost {
					t.Fatalf("node %s: lost=%v queued=%v", e.id, e.lost, e.Queued())
				}
				if e.conns < 0 || (e.disc && e.conns != 0) {
					t.Fatalf("node %s: conns=%d disc=%v", e.id, e.conns, e.disc)
				}
			}
		}
	})
}

func BenchmarkSeen10000(b *testing.B) {
	tb := NewTable(Config{HeartbeatTimeout: 10 * time.Second, DisconnectGrace: 3 * time.Second})
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%05d", i)
		tb.Seen(ids[i], t0)
	}
	now := t0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Millisecond)
		tb.Seen(ids[i%len(ids)], now)
	}
}

// BenchmarkTick10000 measures a Tick that expires nothing while 10,000 nodes
// heartbeat: it must not scan the table.
func BenchmarkTick10000(b *testing.B) {
	tb := NewTable(Config{HeartbeatTimeout: 10 * time.Second, DisconnectGrace: 3 * time.Second})
	for i := range 10000 {
		tb.Seen(fmt.Sprintf("node-%05d", i), t0)
	}
	now := t0.Add(time.Second)
	for b.Loop() {
		if lost := tb.Tick(now); len(lost) != 0 {
			b.Fatal("unexpected loss")
		}
	}
}

// BenchmarkHeartbeatRound10000 is one heartbeat from each of 10,000 nodes
// followed by a Tick, then an expiry of all of them.
func BenchmarkHeartbeatRound10000(b *testing.B) {
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%05d", i)
	}
	for b.Loop() {
		tb := NewTable(Config{HeartbeatTimeout: 10 * time.Second})
		now := t0
		for round := range 3 {
			for _, id := range ids {
				tb.Seen(id, now)
			}
			now = now.Add(time.Duration(round+1) * time.Second)
			tb.Tick(now)
		}
		if lost := tb.Tick(now.Add(time.Minute)); len(lost) != len(ids) {
			b.Fatalf("lost %d, want %d", len(lost), len(ids))
		}
	}
}

// TestLostSince: a lost node says when it was last known alive: the end of
// its session when it disconnected, its last heartbeat otherwise.
func TestLostSince(t *testing.T) {
	cfg := Config{HeartbeatTimeout: 10 * time.Second, DisconnectGrace: 3 * time.Second}
	tb := NewTable(cfg)
	tb.Seen("hb", at(1))
	tb.Seen("dc", at(1))
	tb.Connected("dc", at(1))
	tb.Seen("dc", at(4))
	tb.Disconnected("dc", at(5))
	got := tb.Tick(at(20))
	want := []Lost{
		{ID: "dc", Reason: "disconnected for 3s", Since: at(5)},
		{ID: "hb", Reason: "no heartbeat for 10s", Since: at(1)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lost (-want +got):\n%s", diff)
	}
}

// TestLose: a node found lost by someone else is lost with their reason,
// and Tick does not report it again.
func TestLose(t *testing.T) {
	tb := NewTable(Config{HeartbeatTimeout: 10 * time.Second})
	tb.Seen("a", at(0))
	tb.Lose("a", "its agent exited with code 137")
	if info, _ := tb.Get("a"); !info.Lost || info.LostReason != "its agent exited with code 137" {
		t.Errorf("after Lose: %+v", info)
	}
	if lost := tb.Tick(at(60)); len(lost) > 0 {
		t.Errorf("Tick reported %v after Lose", lost)
	}
	if _, ok := tb.NextDeadline(); ok {
		t.Errorf("a lost node still has a deadline")
	}
	tb.Seen("a", at(61))
	if info, _ := tb.Get("a"); info.Lost {
		t.Errorf("a heartbeat did not bring the node back: %+v", info)
	}
}
